//! Project automation: `cargo xtask <command>`.
//!
//! `setup` installs what the project needs (the single list lives in `setup.rs`),
//! `test` is the one gate (fmt, clippy, host tests, lab tests), `lab`/`vm-test`/`demo`
//! run the soft-RoCE QEMU lab (see `lab/`).

mod build;
mod fuzz;
mod gate;
mod guides;
mod host_bench;
mod lab;
mod memory;
mod perfetto;
mod setup;
mod tui_load;
mod util;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "xtask", about = "rdma-trace project automation")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install everything the project needs on this host (idempotent).
    Setup,
    /// Cross-build the tracer and the companion for another architecture (arm64).
    Build(build::BuildArgs),
    /// The one gate: setup, fmt, clippy, host tests, then the lab tests on every kernel series.
    Test {
        /// Skip the lab tests (QEMU). CI never passes this.
        #[arg(long)]
        no_lab: bool,
    },
    /// Boot the soft-RoCE lab guest: a shell, or run a script with `--run`.
    Lab(lab::LabArgs),
    /// Build the guest binaries, boot each kernel once and run every lab test in that boot.
    VmTest(lab::VmTestArgs),
    /// The soaks (long lab tests, `soak_…`, not in the gate): one boot per kernel, like
    /// vm-test. Run before resolving what they cover.
    Soak(lab::VmTestArgs),
    /// The main job: boot the lab and show rdma-trace watching real verbs workloads over rxe0.
    Demo(lab::DemoArgs),
    /// What watching costs, in the lab (one boot per kernel, not in the gate): each workload
    /// alone, beside bpftrace three ways and beside rdma-trace three ways, in interleaved
    /// rounds; prints the tables and writes them into docs/performance.md.
    Bench(lab::bench::BenchArgs),
    /// Fuzz the capture reader (cargo-fuzz, libFuzzer) for a bounded time.
    Fuzz(fuzz::FuzzArgs),
    /// `rdma-trace story` on a long synthetic stream: its peak memory stays bounded.
    StoryMemory(memory::MemoryArgs),
    /// `rdma-trace export --perfetto` of a big synthetic capture: its peak memory stays
    /// under a bound.
    ExportMemory(memory::ExportArgs),
    /// `rdma-trace explain` of a big synthetic capture: it keeps the run's first events
    /// only, and its peak memory stays under a bound.
    ExplainMemory(memory::ExplainArgs),
    /// docs/guides/ from captures the lab makes on every kernel (`--no-lab`: from those
    /// already in docs/guides/captures/).
    Guides(guides::GuidesArgs),
    /// `rdma-trace tui` replaying a long synthetic capture at top speed: nothing lost, keys
    /// answered; reports frame rate and key latency.
    TuiLoad(tui_load::TuiLoadArgs),
    /// The Perfetto exports in Perfetto's own UI and the flame graphs in chromium: the
    /// committed examples and fresh exports of the lab's last captures.
    PerfettoCheck(perfetto::PerfettoArgs),
}

fn main() {
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Setup => setup::run(),
        Cmd::Build(a) => build::run(&a).map(|_| ()),
        Cmd::Test { no_lab } => gate::run(no_lab),
        Cmd::Lab(a) => setup::for_lab().and_then(|()| lab::lab(a)),
        Cmd::VmTest(a) => setup::for_lab().and_then(|()| lab::vm_test(a)),
        Cmd::Soak(a) => setup::for_lab().and_then(|()| lab::soak(a)),
        Cmd::Demo(a) => setup::for_lab().and_then(|()| lab::demo(a)),
        Cmd::Bench(a) if a.host => host_bench::run(&a.sizes, a.rounds, a.against.as_deref()),
        Cmd::Bench(a) => setup::for_lab().and_then(|()| lab::bench::bench(a)),
        Cmd::Fuzz(a) => setup::run().and_then(|()| fuzz::run(&a)),
        Cmd::StoryMemory(a) => memory::run(&a),
        Cmd::ExportMemory(a) => memory::export(&a),
        Cmd::ExplainMemory(a) => memory::explain(&a),
        Cmd::TuiLoad(a) => tui_load::run(&a),
        Cmd::Guides(a) => guides::run(&a),
        Cmd::PerfettoCheck(a) => {
            setup::for_lab().and_then(|()| setup::perfetto_ui()).and_then(|()| perfetto::run(&a))
        }
    };
    if let Err(e) = res {
        eprintln!("xtask: error: {e:#}");
        std::process::exit(1);
    }
}
