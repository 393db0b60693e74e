//! The companion's step record (docs/workload.md), defined by the format crate.

pub use rdma_trace_format::steps::*;
