//! The configuration parser never panics: any text gives a Config or an error naming a
//! line (issue 9: hostile input).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        match lq_user::config::Config::parse(text, std::path::Path::new("fuzz.toml")) {
            Ok(cfg) => {
                let _ = cfg.controller();
                let _ = cfg.nnh_mapping();
                let _ = cfg.helper_params();
            }
            Err(e) => {
                let _ = e.to_string();
            }
        }
    }
});
