//! Flat JSON rows, from Kafka and from JSONL files.
#![no_main]

use changelake::decode::decode;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = decode(changelake::config::Format::Json, None, Some(data), &[]) {
        assert_ne!(e.reason, "internal", "{}", e.error);
    }
    let _ = changelake::source::file::read_jsonl(std::path::Path::new("f.jsonl"), data);
});
