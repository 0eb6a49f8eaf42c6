//! The YAML config: loads or lists its errors, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = changelake::config::Config::parse(text, std::path::Path::new("/cfg"));
    }
});
