//! The XDP receiver's process_frame on any Ethernet frame, twice, against capacity-limited tables (see lq_fuzz::receive_frame).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| lq_fuzz::receive_frame(data));
