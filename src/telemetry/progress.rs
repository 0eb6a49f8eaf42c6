//! Progress of a bounded run (`run --once`), for a display on a terminal.
//!
//! The core reports how much of each table's input is done — offsets of the
//! high watermarks seen at start, or files of the glob — and how many events
//! it read; what to draw is the command line's business. Nothing is
//! reported to anyone unless a display was installed with [`set_display`]:
//! the daemon, tests and JSON logs pay one atomic load per call.

use std::sync::OnceLock;

/// What a table's progress counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Kafka offsets up to the high watermarks at start.
    Offsets,
    /// Source files matched by the table's path.
    Files,
}

/// Draws progress; installed once by the command line.
pub trait Display: Send + Sync {
    /// A table has `total` units of input to read.
    fn start(&self, table: &str, unit: Unit, total: u64);
    /// `units` more units done, holding `events` change events.
    fn advance(&self, table: &str, units: u64, events: u64);
    /// The table's input is read (or the run stops).
    fn finish(&self, table: &str);
}

static DISPLAY: OnceLock<Box<dyn Display>> = OnceLock::new();

/// Installs the progress display (the first call wins).
pub fn set_display(d: Box<dyn Display>) {
    let _ = DISPLAY.set(d);
}

pub fn start(table: &str, unit: Unit, total: u64) {
    if let Some(d) = DISPLAY.get() {
        d.start(table, unit, total);
    }
}

pub fn advance(table: &str, units: u64, events: u64) {
    if let Some(d) = DISPLAY.get() {
        d.advance(table, units, events);
    }
}

pub fn finish(table: &str) {
    if let Some(d) = DISPLAY.get() {
        d.finish(table);
    }
}
