//! The operator commands behind the command line: run the file sources (and
//! the daemon), replay, offsets, show and probe. Kept apart from `cli`, which
//! only parses arguments and dispatches, so that the tools (the demo prints
//! tables with [`show`]) can use them without depending on the command line.

pub mod offsets;
pub mod probe;
pub mod replay;
pub mod run;
pub mod show;
pub mod tables;
