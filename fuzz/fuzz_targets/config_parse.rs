//! The configuration file: TOML and its validation (see lq_fuzz::config_parse).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| lq_fuzz::config_parse(data));
