//! The IPFIX collector's message decoder on any message (see lq_fuzz::ipfix_decode).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| lq_fuzz::ipfix_decode(data));
