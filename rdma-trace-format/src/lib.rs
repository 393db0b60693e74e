//! The records rdma-trace shares with files, pipes and other programs, and nothing else:
//! `event` (what a probe saw), `capture` (the stream around events: header, stats, loss,
//! state, steps, trailer), `reader` (reading such a stream, damage named by line) and
//! `steps` (the companion workload's step record). It knows no kernel and no probe spec;
//! the tracer's catalog says how each probe's fields are shown.

pub mod capture;
pub mod event;
pub mod fd;
pub mod fields;
pub mod loss;
pub mod reader;
pub mod stack;
pub mod steps;

/// The page size of the architecture the programs are built for (x86-64): what a pin
/// charges per page and what `vm_pgoff` counts in.
pub const PAGE: u64 = 4096;
