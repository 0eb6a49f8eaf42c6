//! The other side of the comparison: delta-rs MERGE, driven through
//! `benches/deltars_merge.py` (Python `deltalake`). It copies our loaded
//! table, MERGEs every batch file into the copy and reports its timings;
//! afterwards it checks that both tables hold the same (key, sequence) pairs.
//! Separate because it is another engine in another process.

use std::path::{Path, PathBuf};

use changelake::config::Format;
use changelake::error::{Error, Result};

/// The script's text, built into the binary: an installed `changelake` (or
/// one built in another checkout) runs the bench from any directory.
const SCRIPT: &str = include_str!("../../../benches/deltars_merge.py");

/// Writes the script into the bench's work directory and returns its path.
fn script(dir: &Path) -> Result<PathBuf> {
    let path = dir.join("deltars_merge.py");
    std::fs::write(&path, SCRIPT).map_err(|e| Error::Input(format!("{}: {e}", path.display())))?;
    Ok(path)
}

/// What the delta-rs side needs: `python3` with `deltalake` and `pyarrow`.
pub fn preflight() -> Result<()> {
    let missing = |why: String| {
        Error::Input(format!(
            "the delta-rs comparison needs python3 with `deltalake` and `pyarrow` \
             (pip install deltalake pyarrow): {why}; --no-deltars runs without it"
        ))
    };
    let out = std::process::Command::new("python3")
        .args(["-c", "import deltalake, pyarrow"])
        .output()
        .map_err(|e| missing(format!("python3: {e}")))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(missing(err.lines().last().unwrap_or("import failed").trim().to_string()));
    }
    Ok(())
}

/// The script's `--format` for the batch files' format.
fn format_args(format: Format) -> [&'static str; 2] {
    ["--format", format.name()]
}

/// Runs the delta-rs side (copy of the loaded table, then every batch) and reads its timings.
pub fn run(dir: &Path, ours: &str, files: &[PathBuf], format: Format) -> Result<serde_json::Value> {
    let mut c = std::process::Command::new("python3");
    c.arg(script(dir)?)
        .arg("merge")
        .arg("--ours")
        .arg(ours.trim_start_matches("file://"))
        .arg("--table")
        .arg(dir.join("deltars"));
    c.arg("--out").arg(dir.join("deltars.json"));
    c.args(format_args(format));
    for f in files {
        c.arg(f);
    }
    let st =
        c.status().map_err(|e| Error::Input(format!("python3 benches/deltars_merge.py: {e}")))?;
    if !st.success() {
        return Err(Error::Input(format!("benches/deltars_merge.py failed ({st})")));
    }
    let text = std::fs::read_to_string(dir.join("deltars.json"))
        .map_err(|e| Error::Input(format!("deltars.json: {e}")))?;
    serde_json::from_str(&text).map_err(|e| Error::Input(format!("deltars.json: {e}")))
}

/// Both engines applied the same batches: adds the comparison of the two
/// tables (`same_result`, `mismatch`, `rows`) to delta-rs' timings `d`.
pub fn compare(
    mut d: serde_json::Value,
    dir: &Path,
    ours: &str,
    format: Format,
) -> Result<serde_json::Value> {
    let out = std::process::Command::new("python3")
        .arg(script(dir)?)
        .arg("compare")
        .args(format_args(format))
        .arg("--ours")
        .arg(ours.trim_start_matches("file://"))
        .arg("--table")
        .arg(dir.join("deltars"))
        .output()
        .map_err(|e| Error::Input(format!("python3: {e}")))?;
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| {
        Error::Input(format!("compare: {e}: {}", String::from_utf8_lossy(&out.stderr)))
    })?;
    d["same_result"] = c["same_result"].clone();
    d["mismatch"] = c["mismatch"].clone();
    d["rows"] = c["rows"].clone();
    Ok(d)
}
