//! The live edge: load the eBPF object, attach the plan (aya types stay here and in
//! `source`), and run the tracer until it is told to stop.

pub mod attach;
pub mod kprobe_events;
pub mod privilege;
mod run_loop;
pub mod seed;
pub mod spawn;
pub mod stack_ids;
pub mod trace;
