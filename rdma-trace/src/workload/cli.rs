//! Command line of `rdma-trace-workload`.

use super::size::{Human, SizeError, parse_size, parse_size_list};
use crate::steps::{Config, Mode};
use clap::Parser;

/// A verbs program that knows its own steps and announces them, so rdma-trace can join the
/// kernel events it sees to "step 7, ibv_reg_mr of 64 MiB". See docs/workload.md.
#[derive(Parser, Debug)]
#[command(name = "rdma-trace-workload", version)]
pub struct Args {
    /// RDMA device to open.
    #[arg(long, default_value = "rxe0")]
    pub device: String,
    /// Port of the device.
    #[arg(long, default_value_t = 1)]
    pub port: u8,
    /// GID index used as source and destination of the loopback connection
    /// (1 = ::ffff:10.0.0.1 on the lab's rxe0).
    #[arg(long, default_value_t = 1)]
    pub gid_index: u32,
    /// Sizes of the MRs to register, in order (binary units: 4K, 1M, …). Transfers read from
    /// the first and land in the last.
    #[arg(long, default_value = "4K,64K,1M,16M,64M", value_parser = parse_sizes)]
    pub mr_sizes: SizeList,
    /// Back the MRs with huge pages (MAP_HUGETLB); fails clearly if the pool is empty.
    #[arg(long)]
    pub hugepages: bool,
    /// Register the MRs for on-demand paging (IBV_ACCESS_ON_DEMAND): nothing is pinned;
    /// the device faults pages in. Needs a device with ODP (soft-RoCE has it from 6.15).
    #[arg(long)]
    pub odp: bool,
    /// How completions are waited for.
    #[arg(long, value_enum, default_value_t = Mode::Events)]
    pub mode: Mode,
    /// Work requests per run (alternating RDMA WRITE and SEND, each signaled).
    #[arg(long, default_value_t = 8)]
    pub iterations: u32,
    /// Bytes per work request (at most the smallest MR).
    #[arg(long, default_value = "4K", value_parser = parse_msg_size)]
    pub msg_size: u32,
    /// Repeat the whole run (open … close) until Ctrl-C.
    #[arg(long = "loop")]
    pub repeat: bool,
    /// Milliseconds to wait after the work, with everything still registered, before
    /// teardown (for `rdma res show`, /proc/<pid>/status VmPin, …).
    #[arg(long, default_value_t = 0)]
    pub hold_ms: u64,
    /// Where the step records go (JSON Lines); `-` is stdout.
    #[arg(long, default_value = "-")]
    pub announce: String,
    /// Give up when one run (plus its hold) takes longer than this many seconds.
    #[arg(long, default_value_t = 120)]
    pub timeout_s: u32,
    /// Instead of a run: open the device and a PD, then register and deregister a buffer
    /// of each --mr-sizes N times, timing each pair (what `cargo xtask bench` measures).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub reg_loop: u32,
    /// Instead of a run: open the device and a PD, register N MRs over each --mr-sizes
    /// buffer, say so on stderr ("holding N MRs"), hold them for --hold-ms (or until
    /// Ctrl-C/SIGTERM), then deregister them. Many MRs for a late viewer to join.
    #[arg(long, value_name = "N", default_value_t = 0, conflicts_with = "reg_loop")]
    pub hold_mrs: u32,
}

/// `--mr-sizes`, parsed.
#[derive(Debug, Clone)]
pub struct SizeList(pub Vec<u64>);

fn parse_sizes(s: &str) -> Result<SizeList, SizeError> {
    parse_size_list(s).map(SizeList)
}

fn parse_msg_size(s: &str) -> Result<u32, SizeError> {
    let n = parse_size(s)?;
    u32::try_from(n).map_err(|_| SizeError::TooLargeForWr(Human(n).to_string()))
}

impl Args {
    pub(crate) fn config(&self) -> Config {
        Config {
            device: self.device.clone(),
            port: self.port,
            gid_index: self.gid_index,
            mr_sizes: self.mr_sizes.0.clone(),
            hugepages: self.hugepages,
            mode: self.mode,
            iterations: self.iterations,
            msg_size: self.msg_size,
            repeat: self.repeat,
            hold_ms: self.hold_ms,
            odp: self.odp,
            announce: self.announce.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_documented_spread() {
        let a = Args::try_parse_from(["rdma-trace-workload"]).unwrap();
        let c = a.config();
        assert_eq!(c.device, "rxe0");
        assert_eq!(c.gid_index, 1);
        assert_eq!(c.mr_sizes, [4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20]);
        assert_eq!(c.mode, Mode::Events);
        assert_eq!(c.msg_size, 4096);
        assert_eq!(c.announce, "-");
        assert!(!c.repeat && !c.hugepages);
    }

    #[test]
    fn options_as_typed() {
        let a = Args::try_parse_from([
            "rdma-trace-workload",
            "--mr-sizes",
            "4K,1M",
            "--mode",
            "poll",
            "--iterations",
            "3",
            "--loop",
            "--hold-ms",
            "500",
            "--msg-size",
            "1K",
            "--announce",
            "/tmp/x.jsonl",
        ])
        .unwrap();
        let c = a.config();
        assert_eq!(c.mr_sizes, [4096, 1 << 20]);
        assert_eq!(c.mode, Mode::Poll);
        assert_eq!((c.iterations, c.hold_ms, c.msg_size), (3, 500, 1024));
        assert!(c.repeat);
        assert_eq!(c.announce, "/tmp/x.jsonl");
    }

    #[test]
    fn a_bad_size_is_refused_with_the_reason() {
        let e = Args::try_parse_from(["rdma-trace-workload", "--mr-sizes", "4K,12Q"]).unwrap_err();
        assert!(e.to_string().contains("12Q"), "{e}");
        let e = Args::try_parse_from(["rdma-trace-workload", "--msg-size", "8G"]).unwrap_err();
        assert!(e.to_string().contains("too large"), "{e}");
    }
}
