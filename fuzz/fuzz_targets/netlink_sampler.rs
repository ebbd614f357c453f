//! The helper sampler's rtnetlink replies (link, stats, qdisc, class dumps) and dcbnl (see lq_fuzz::netlink_sampler).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| lq_fuzz::netlink_sampler(data));
