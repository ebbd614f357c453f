//! The controller's rtnetlink nexthop codec and the ACK/dump loops of rtnl (see lq_fuzz::nexthop_decode).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| lq_fuzz::nexthop_decode(data));
