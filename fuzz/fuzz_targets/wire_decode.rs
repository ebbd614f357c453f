//! wire::decode with a permissive and a strict policy; accepted advertisements round-trip (see lq_fuzz::wire_decode).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| lq_fuzz::wire_decode(data));
