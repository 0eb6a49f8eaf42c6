//! The storage floor of a run: how long reading and writing its bytes would
//! take at this machine's own rates, so each run can say how close it is to
//! the physical limit (issue 15: a copy-on-write run must at least read the
//! files it touches and write their replacements).
//!
//! Measured once per bench on the bench directory the tables live in, the
//! way the local store writes (whole files, no fsync: the page cache takes
//! them, as it takes the tables' files) and reads them back.

use std::io::Write as _;
use std::path::Path;
use std::time::Instant;

use changelake::error::{Error, Result};

/// Bytes per second this machine reads and writes files at.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct IoRates {
    pub read_bytes_per_second: f64,
    pub write_bytes_per_second: f64,
}

/// Size of the probe: large against a data file, small against memory.
const PROBE_BYTES: usize = 256 << 20;

impl IoRates {
    /// Writes and reads back a probe file in `dir` (removed afterwards).
    pub fn measure(dir: &Path) -> Result<IoRates> {
        let io =
            |e: std::io::Error| Error::Input(format!("storage probe in {}: {e}", dir.display()));
        let path = dir.join("io-probe.bin");
        // Incompressible-looking bytes, like compressed parquet pages.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let chunk: Vec<u8> = (0..8 << 20)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        let t0 = Instant::now();
        let mut f = std::fs::File::create(&path).map_err(io)?;
        for _ in 0..PROBE_BYTES / chunk.len() {
            f.write_all(&chunk).map_err(io)?;
        }
        drop(f);
        let write = t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        let back = std::fs::read(&path).map_err(io)?;
        let read = t0.elapsed().as_secs_f64();
        let _ = std::fs::remove_file(&path);
        if back.len() != PROBE_BYTES {
            return Err(Error::Input("storage probe: short read".into()));
        }
        Ok(IoRates {
            read_bytes_per_second: PROBE_BYTES as f64 / read.max(1e-9),
            write_bytes_per_second: PROBE_BYTES as f64 / write.max(1e-9),
        })
    }

    /// Seconds to read `read` bytes and write `written` bytes at these rates.
    pub fn floor_seconds(&self, read: u64, written: u64) -> f64 {
        read as f64 / self.read_bytes_per_second + written as f64 / self.write_bytes_per_second
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_adds_reading_and_writing_at_their_own_rates() {
        let r = IoRates { read_bytes_per_second: 100.0, write_bytes_per_second: 50.0 };
        assert_eq!(r.floor_seconds(200, 100), 4.0);
        assert_eq!(r.floor_seconds(0, 0), 0.0);
    }
}
