//! A gNMI path, a read rule and a SubscribeRequest's elements (see lq_fuzz::gnmi_path).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| lq_fuzz::gnmi_path(data));
