use clap::Parser;
use rdma_trace::cli::{Cli, Cmd};
use rdma_trace::cmd;

fn run() -> anyhow::Result<i32> {
    match Cli::parse().cmd {
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
    }
}

fn main() {
    match run() {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("rdma-trace: error: {e:#}");
            std::process::exit(1);
        }
    }
}

/// A capture stream is millions of short-lived events, each a few small allocations that
/// die in the order they were made; glibc's allocator slows as its heap fragments under
/// that (`cargo xtask bench --host` shows it), mimalloc does not. Built without transparent
/// huge pages: with them a 10 M-event `story` peaked at 89 MiB, without at 75 MiB, as fast.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
