//! The subcommands: each gathers what the libraries return and prints it.

pub(crate) mod connected;
pub mod daemon;
pub mod explain;
pub mod probes;
pub mod report;
pub mod selftest;
pub(crate) mod start;
pub mod story;
pub mod trace;
pub mod tui;
