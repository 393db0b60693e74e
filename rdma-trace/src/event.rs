//! The event record (JSON Lines; docs/event-format.md): defined by the format crate, which
//! reads and writes it without the engine. How a field is shown comes from the catalog
//! (`pipeline::render::of`).

pub use rdma_trace_format::event::*;
