//! One IPFIX Transport Session: a stream of messages (templates, then data) through the collector's stateful decoder (see lq_fuzz::ipfix_session).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| lq_fuzz::ipfix_session(data));
