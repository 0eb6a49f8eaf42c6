//! The SQL predicate language of `delete_when`, source filters and `show --where`.
#![no_main]

use changelake::value::Value;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(e) = changelake::expr::parse(text) {
            // Evaluating it over any row answers true or not, never panics.
            let _ = e.matches(&|path| Value::Str(path.join(".")));
            let _ = e.matches(&|_| Value::Null);
            let _ = e.matches(&|_| Value::Int(7));
        }
    }
});
