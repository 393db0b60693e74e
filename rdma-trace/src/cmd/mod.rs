//! The subcommands: each gathers what the libraries return and prints it.

pub mod connected;
pub mod daemon;
pub mod explain;
pub mod probes;
pub mod report;
pub mod story;
pub mod trace;
pub mod tui;

/// Starts the tracer, its notices on stderr; `None` when this process lacks the
/// privileges (the one line was printed: exit 2).
fn start_tracer(
    opts: crate::live::trace::TraceOptions,
) -> anyhow::Result<Option<crate::live::trace::Tracer>> {
    use crate::live::trace::{NotPrivileged, Tracer};
    match Tracer::start(opts, &mut trace::print_notice) {
        Ok(t) => Ok(Some(t)),
        Err(e) => match e.downcast_ref::<NotPrivileged>() {
            Some(NotPrivileged(msg)) => {
                eprintln!("{msg}");
                Ok(None)
            }
            None => Err(e),
        },
    }
}
