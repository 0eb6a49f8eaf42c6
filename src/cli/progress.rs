//! The progress lines of `run --once` on a terminal: per table, files or
//! offsets done of the total, events per second and the time left.
//!
//! Installed only when stderr is a terminal and logs are text; log lines
//! are then written above the bars ([`LogWriter`]) instead of through them.

use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use changelake::telemetry::progress::{self, Unit};

static BARS: OnceLock<MultiProgress> = OnceLock::new();

/// Shows progress bars on stderr from now on.
pub fn install() {
    let bars = BARS.get_or_init(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
    progress::set_display(Box::new(Bars { bars: bars.clone(), tables: Mutex::default() }));
}

struct Bars {
    bars: MultiProgress,
    tables: Mutex<HashMap<String, TableBar>>,
}

struct TableBar {
    bar: ProgressBar,
    events: u64,
    started: Instant,
}

impl progress::Display for Bars {
    fn start(&self, table: &str, unit: Unit, total: u64) {
        let unit = match unit {
            Unit::Offsets => "offsets",
            Unit::Files => "files",
        };
        let template = format!(
            "{{prefix:>16}} [{{bar:28}}] {{human_pos}}/{{human_len}} {unit} {{msg}} eta {{eta}}"
        );
        let style = ProgressStyle::with_template(&template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        let bar = self.bars.add(ProgressBar::new(total).with_style(style));
        bar.set_prefix(table.to_string());
        let mut tables = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        tables.insert(table.into(), TableBar { bar, events: 0, started: Instant::now() });
    }

    fn advance(&self, table: &str, units: u64, events: u64) {
        let mut tables = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = tables.get_mut(table) {
            t.events += events;
            t.bar.inc(units);
            let rate = t.events as f64 / t.started.elapsed().as_secs_f64().max(1e-3);
            t.bar.set_message(format!("· {} events · {rate:.0} events/s", t.events));
        }
    }

    fn finish(&self, table: &str) {
        let tables = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = tables.get(table) {
            t.bar.finish();
        }
    }
}

/// Where log lines go: stderr, written above the progress bars while any are shown.
#[derive(Clone, Copy)]
pub struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match BARS.get() {
            Some(bars) => bars.suspend(|| io::stderr().write_all(buf)).map(|()| buf.len()),
            None => io::stderr().write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogWriter;
    fn make_writer(&'a self) -> LogWriter {
        *self
    }
}
