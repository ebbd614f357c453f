//! The key chain file of `[helper] key-chain` and `lqd decode --key-chain` (see lq_fuzz::key_chain_parse).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| lq_fuzz::key_chain_parse(data));
