//! rdma-trace: watch the Linux RDMA stack work. See ARCHITECTURE.md for the data path:
//! catalog → select → attach → source → decode → enrich/correlate → sinks.

pub mod attach;
pub mod btf;
pub mod catalog;
pub mod cli;
pub mod correlate;
pub mod decode;
pub mod elfsym;
pub mod enrich;
pub mod event;
pub mod fds;
pub mod kernel;
pub mod ksyms;
pub mod limits;
pub mod privilege;
pub mod probes_cmd;
pub mod render;
pub mod report;
pub mod select;
pub mod setup;
pub mod sink;
pub mod source;
pub mod stats;
pub mod syscalls;
pub mod trace;
pub mod workload;
