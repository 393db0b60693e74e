//! The subcommands: each gathers what the libraries return and prints it.

pub mod daemon;
pub mod probes;
pub mod story;
pub mod trace;
pub mod tui;
