//! Capture format v1 (docs/event-format.md): the records are the format crate's; what needs
//! the catalog to write them (which fields are pointers) is here.

pub use rdma_trace_format::capture::*;
use rdma_trace_format::event::Event;

/// Why the kernel's tables (what a late subscriber's state is read from: `rdma res show
/// mr`, /proc) could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    #[error("cannot run `rdma` (iproute2) to read the MRs that exist: {0}")]
    NoTool(std::io::Error),
    /// What `rdma` said on stderr when it failed.
    #[error("rdma res show mr: {0}")]
    Tool(String),
    #[error("rdma res show mr: {0}")]
    Json(#[from] serde_json::Error),
    #[error("rdma res show mr: not a JSON array")]
    NotArray,
    #[error("the thread reading the kernel's tables ended")]
    ThreadEnded,
}

/// The pointer fields (render `PtrOrErr`) of an event's probe.
fn pointer_fields(ev: &Event) -> impl Iterator<Item = crate::event::FieldId> {
    use crate::event::EventKind;
    use crate::plan::catalog::{self, Render};
    let spec = ev.probe().map(catalog::by_id);
    let fields = match (spec, ev.kind) {
        (Some(s), EventKind::Return) => s.ret,
        (Some(s), _) => s.entry,
        (None, _) => &[],
    };
    fields.iter().filter(|f| f.render == Render::PtrOrErr).map(|f| f.id)
}

/// Whether writing `ev` moves anything to `errors` (`split_errors`).
pub(crate) fn has_errors(ev: &Event) -> bool {
    pointer_fields(ev).any(|n| ev.field(n).and_then(rdma_trace_format::event::err_ptr).is_some())
}

/// For writing: ERR_PTR values of pointer fields move to `errors`, by name.
pub(crate) fn split_errors(ev: &mut Event) {
    let names: Vec<crate::event::FieldId> = pointer_fields(ev).collect();
    for name in names {
        let Some(e) = ev.field(name).and_then(rdma_trace_format::event::err_ptr) else { continue };
        ev.fields.remove(name);
        let errno = -e;
        ev.errors.insert(
            name.as_str().to_string(),
            KernelError { err: rdma_trace_format::event::errno_name(errno).to_string(), errno },
        );
    }
}
