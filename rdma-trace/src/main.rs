use clap::Parser;
use rdma_trace::cli::{Cli, Cmd};
use rdma_trace::cmd;

fn run() -> anyhow::Result<i32> {
    let cli = Cli::parse();
    if reads_only(&cli.cmd) {
        // A reader that stops reading (`| head`, `| jq` that failed) ends this command
        // quietly, as it ends cat: the default action of SIGPIPE, which Rust's runtime
        // sets aside (every print would panic on EPIPE instead). Not for trace, daemon and
        // tui: they hold probes and outputs that have to end in order.
        // SAFETY: signal(2) with the default disposition, before any thread is started.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    match cli.cmd {
        Cmd::Trace(a) => cmd::trace::run(a),
        Cmd::Daemon(a) => cmd::daemon::run(a),
        Cmd::Tui(a) => cmd::tui::run(a),
        Cmd::Probes { no_attach, json } => cmd::probes::run(!no_attach, json),
        Cmd::Story { capture, steps, json, read } => {
            cmd::story::story(&capture, steps.as_deref(), json, read)
        }
        Cmd::Replay { file, stacks, read } => cmd::story::replay(&file, stacks, read),
        Cmd::Explain(a) => cmd::explain::run(a),
        Cmd::Report { files, json, read } => cmd::report::report(&files, json, read),
        Cmd::Diff { a, b, fail_on, json, read } => cmd::report::diff(&a, &b, &fail_on, json, read),
        Cmd::Export { files, perfetto, folded, flamegraph, read } => {
            cmd::report::export(&files, perfetto.as_deref(), folded.as_deref(), flamegraph.as_deref(), read)
        }
        Cmd::Selftest { device, gid_index, output } => {
            cmd::selftest::run(device.as_deref(), gid_index, &output)
        }
        Cmd::DetachAfterExit { wait_fd, events_file, events } => {
            Ok(cmd::trace::detach_after_exit(wait_fd, events_file.as_deref(), &events))
        }
    }
}

/// 2 for bad input (a value, a file that cannot be opened or read as a capture), 1 for a
/// run that failed while it ran (README and `--help`: Exit status).
fn exit_code(e: &anyhow::Error) -> i32 {
    let bad = e
        .chain()
        .any(|c| c.is::<rdma_trace::cli::BadInput>() || c.is::<rdma_trace::source::capture::ReadError>());
    if bad { 2 } else { 1 }
}

/// The commands that only read files and print what they find.
fn reads_only(cmd: &Cmd) -> bool {
    matches!(
        cmd,
        Cmd::Story { .. }
            | Cmd::Replay { .. }
            | Cmd::Explain(_)
            | Cmd::Report { .. }
            | Cmd::Diff { .. }
            | Cmd::Export { .. }
    )
}

fn main() {
    match run() {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("rdma-trace: error: {e:#}");
            std::process::exit(exit_code(&e));
        }
    }
}

/// A capture stream is millions of short-lived events, each a few small allocations that
/// die in the order they were made; glibc's allocator slows as its heap fragments under
/// that (`cargo xtask bench --host` shows it), mimalloc does not. Built without transparent
/// huge pages: with them a 10 M-event `story` peaked at 89 MiB, without at 75 MiB, as fast.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
