//! Tools on top of the library: the benchmark, the broker latency bench and
//! the demo. They drive the library like any user would; the library knows
//! nothing about them.

pub mod bench;
pub mod bench_broker;
pub mod demo;
pub mod soak;
pub mod workload;
