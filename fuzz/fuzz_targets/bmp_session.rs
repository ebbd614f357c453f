//! A BMP (RFC 7854) TCP stream through lqd's station logic (see lq_fuzz::bmp_session).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| lq_fuzz::bmp_session(data));
