//! Starting the tracer for a subcommand: its notices, one line of stderr each, and the one
//! line said when this process lacks the privileges.

/// Starts the tracer, its notices on stderr; `None` when this process lacks the
/// privileges (the one line was printed: exit 2).
pub(crate) fn tracer(
    opts: crate::live::trace::TraceOptions,
) -> anyhow::Result<Option<crate::live::trace::Tracer>> {
    use crate::live::trace::{TraceError, Tracer};
    match Tracer::start(opts, &mut print_notice) {
        Ok(t) => Ok(Some(t)),
        Err(TraceError::NotPrivileged(msg)) => {
            eprintln!("{msg}");
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// One line of stderr per notice.
pub(crate) fn print_notice(n: crate::live::trace::Notice) {
    use crate::live::trace::Notice;
    match n {
        Notice::Blocked(why) => eprintln!("rdma-trace: {why}"),
        Notice::StaleEvents(Ok(0)) => {}
        Notice::StaleEvents(Ok(n)) => {
            eprintln!("rdma-trace: removed {n} kprobe events left by runs that were killed")
        }
        Notice::StaleEvents(Err(e)) => {
            eprintln!("rdma-trace: cannot check kprobe_events for stale events: {e}")
        }
        Notice::Skipped { id, reason } => eprintln!("rdma-trace: skip {id:<13} {reason}"),
        Notice::Mlx5(check) => eprintln!("rdma-trace: {check}"),
        Notice::Attach(o) => match &o.attached {
            Err(e) => {
                eprintln!("rdma-trace: skip {:<13} {} ({}): attach failed: {e}", o.id, o.symbol, o.module)
            }
            Ok(()) => {
                if let Some(note) = &o.note {
                    eprintln!("rdma-trace: note {:<13} {}: {note}", o.id, o.symbol);
                }
            }
        },
        Notice::StepMarker(Ok(_)) => {}
        Notice::StepMarker(Err(why)) => eprintln!("rdma-trace: skip {:<13} {why}", "companion_step"),
        Notice::Tracing { attached, skipped, planned, syscalls } => eprintln!(
            "rdma-trace: tracing ({attached} probes attached, {skipped} skipped; planned in {} ms){}",
            planned.as_millis(),
            if syscalls { ", watching syscalls" } else { "" }
        ),
        Notice::Stopped { why, still_running: Some(pid) } => {
            eprintln!("rdma-trace: stopped on {why}; the command (pid {pid}) is still running")
        }
        Notice::Stopped { why, still_running: None } => eprintln!("rdma-trace: stopped on {why}"),
    }
}
