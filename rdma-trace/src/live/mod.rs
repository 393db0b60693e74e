//! The live edge: load the eBPF object, attach the plan (aya types stay here and in
//! `source`), and run the tracer until it is told to stop.

pub mod attach;
pub(crate) mod counted;
pub(crate) mod detach;
mod error;
pub(crate) mod kprobe_events;
pub mod privilege;
mod run_loop;
pub mod seed;
pub(crate) mod spawn;
pub(crate) mod stack_ids;
pub(crate) mod trace;
