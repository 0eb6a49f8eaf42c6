//! Milliseconds per phase of a run or of staging, for the debug logs that
//! show where a batch spends its time (engine and table targets at debug level).

use std::time::Instant;

pub struct Phases {
    lap: Instant,
    done: Vec<(&'static str, f64)>,
}

impl Default for Phases {
    fn default() -> Self {
        Phases::new()
    }
}

impl Phases {
    pub fn new() -> Phases {
        Phases { lap: Instant::now(), done: vec![] }
    }

    /// Ends the phase called `name` (it began when the previous one ended).
    pub fn mark(&mut self, name: &'static str) {
        self.done.push((name, self.lap.elapsed().as_secs_f64() * 1e3));
        self.lap = Instant::now();
    }

    /// The phases so far and their milliseconds.
    pub fn done(&self) -> &[(&'static str, f64)] {
        &self.done
    }
}
