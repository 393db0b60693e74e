//! rdma-trace: watch the Linux RDMA stack work. The folders are the stages of one
//! pipeline (ARCHITECTURE.md):
//!
//! `plan` (catalog × this kernel) → `live` (load, attach, run) → `source` (the ring) →
//! `pipeline` (decode → enrich → correlate) → `output` (text, JSONL, report, summary,
//! metrics), `tui` (the terminal application) and `explain` (the teacher, with its lessons
//! and frame notes); `serve` hands the stream to a daemon's subscribers.
//! `cmd` holds the subcommands, which do the printing. `event`, `capture` and `steps` are
//! the record formats everything shares (the tracer's events, the capture stream around
//! them, the companion's steps); `clock` measures another host's clock against this one;
//! `workload` is the companion, which imports nothing of the engine.

// What no caller outside the crate uses (cmd/ and main.rs, the tests, the benches) is
// pub(crate): the public items are the crate's surface.
#![warn(unreachable_pub)]

pub mod account;
pub mod capture;
pub mod cli;
pub mod clock;
pub mod cmd;
pub mod event;
pub mod explain;
pub mod live;
pub mod output;
pub mod pipeline;
pub mod plan;
pub mod serve;
pub mod sink;
pub mod source;
pub mod steps;
pub mod tui;
pub mod units;
pub mod util;
pub mod workload;
