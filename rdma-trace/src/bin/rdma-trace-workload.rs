//! `rdma-trace-workload`: the companion verbs workload (docs/workload.md).

use clap::Parser;

fn main() {
    let args = rdma_trace::workload::cli::Args::parse();
    if let Err(e) = rdma_trace::workload::main_with(args) {
        eprintln!("rdma-trace-workload: error: {e:#}");
        std::process::exit(1);
    }
}
