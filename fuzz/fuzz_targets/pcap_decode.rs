//! lqd decode --pcap on any capture file (see lq_fuzz::pcap_decode).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| lq_fuzz::pcap_decode(data));
