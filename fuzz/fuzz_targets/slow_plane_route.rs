//! The slow plane's route decoder and core on raw rtnetlink bytes (see lq_fuzz::slow_plane_route).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| lq_fuzz::slow_plane_route(data));
