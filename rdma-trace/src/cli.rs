//! The command line, written to teach: each subcommand says what it shows in RDMA terms.

use crate::live::detach::HELPER as DETACH_HELPER;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// Bad input, told apart from a run that failed: a wrong value, a file that cannot be
/// opened or is no capture. `main` exits 2 on it (and on a reader's error), as on a usage
/// error.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

/// `anyhow::bail!` for bad input.
#[macro_export]
macro_rules! bad_input {
    ($($t:tt)*) => {
        return Err(anyhow::Error::new($crate::cli::BadInput(format!($($t)*))))
    };
}

#[derive(Parser)]
#[command(
    name = "rdma-trace",
    version,
    about = "Watch the Linux RDMA stack work: MR pinning, doorbell/queue mmaps, interrupt → completion event",
    long_about = "rdma-trace attaches eBPF probes to the kernel's RDMA paths and shows, live, what a verbs \
program makes the kernel do:\n\
  • memory pinning — ibv_reg_mr → uverbs ioctl → provider reg_user_mr → ib_umem_get pins the pages \
(charged to RLIMIT_MEMLOCK) → lkey/rkey\n\
  • mmap — ibv_open_device/create_qp/create_cq map doorbell (UAR) pages and queue buffers through \
ib_uverbs_mmap; on hardware the doorbell then becomes a plain MMIO store, no syscall\n\
  • completion events — NIC interrupt (or soft-RoCE worker) → ib_uverbs_comp_handler → the \
completion channel wakes ibv_get_cq_event\n\n\
Probe positions and struct offsets are read from the running kernel's BTF, so one binary works across \
kernel versions. Needs root (CAP_BPF + CAP_PERFMON).",
    after_help = "Exit status: 0 done; 1 diff --fail-on tripped, or a run that failed while it ran (an \
output that could not be written, nothing to trace); 2 a usage error or bad input (a wrong value, a \
missing file, a file that is no capture, a pid that does not exist, no privileges)."
)]
/// The command line: one subcommand.
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

/// The subcommands (`rdma-trace --help` lists them).
#[derive(Subcommand)]
pub enum Cmd {
    /// Stream RDMA kernel events (and a traced program's verbs-related syscalls) as text or JSON Lines.
    #[command(long_about = "Attach every probe this kernel supports and print one line per event: \
MR registrations with their pinned range, pages, latency and lkey/rkey; uverbs mmaps with the VMA, its \
flags and cache mode; completion events with their CQ's user handle and the context they ran in (a kworker \
on soft-RoCE, or a tasklet in the poster's own write(2) on older kernels; softirq on hardware); the libibverbs calls (uprobes) that set them off. With `--pid` or \
`-- CMD`, that program's ioctl/mmap/read/write/poll syscalls are shown too (and its children's), with \
the uverbs and completion-channel fds recognised. `--story` ends with the joined story (see `story`). \
Ctrl-C stops; every captured event is kept, and events lost to a full ring buffer are counted per probe \
and shown.")]
    Trace(TraceArgs),
    /// Keep the probes attached and serve the stream to subscribers on a Unix socket.
    #[command(
        long_about = "Attach every probe this kernel supports and keep them, watching the syscalls of \
every process seen using verbs. Subscribers connect to the Unix socket (`rdma-trace trace --connect SOCKET`, \
no root or RDMA needed on their side): each gets a capture header, the state of what is pinned and mapped \
per process when it joined, then the live records (format v1, docs/event-format.md). A subscriber that \
falls behind loses records and is told how many; it never slows the daemon or the others. Only root, the \
daemon's user and the uids given with --allow-uid may subscribe (SO_PEERCRED). SIGINT/SIGTERM: switch the \
probes off, drain, send every subscriber the trailer, exit 0 (a helper detaches the probes after the \
daemon has exited)."
    )]
    Daemon(DaemonArgs),
    /// Watch the three paths on screens: live here, a daemon, or a capture replayed.
    #[command(
        long_about = "The pinning, mmap and interrupt → completion paths on screens: an overview, MRs, \
uverbs mappings, the completion path per CQ, the event stream with stacks annotated. `rdma-trace tui` \
traces here (root; `--pid`, `-- CMD` as `trace`); `--connect SOCKET` shows a daemon (no root or RDMA \
needed); `tui FILE` replays a capture with time controls (space pauses, n steps, + and - change the \
speed ×0.1–×100, g restarts, G jumps to the end; paused live, the rows hold still while the counts go on). \
Keys: tab or 1-6 switch screens, arrows or j/k select, e explains the selected row's path (an MR, a mapping, a \
CQ, an event), enter shows an event whole, / filters, ? help (esc closes), q quits."
    )]
    Tui(TuiArgs),
    /// Show the probe plan for this kernel: symbol, module, attached or skipped, and why.
    #[command(long_about = "Resolve every catalog probe against this kernel (/proc/kallsyms for the symbol \
and its module, BTF for parameter positions and field offsets) and attach it, which needs root like `trace` \
(`--no-attach` only resolves, unprivileged). Functions only a \
hardware NIC driver calls (mlx5_ib_mmap, rdma_user_mmap_io, mlx5_ib_reg_user_mr) are labelled: they \
attach on any kernel with the module loaded but fire only with a ConnectX NIC.")]
    Probes {
        /// Only resolve the plan; don't load or attach anything.
        #[arg(long)]
        no_attach: bool,
        /// One JSON object a line per probe, for scripts, each with the same keys: id, kind,
        /// status (planned, attached or skipped), hardware_only; symbol, module, return (it
        /// has a return probe), path (a uprobe's library): null when skipped before
        /// resolving; reason: why skipped, else null.
        #[arg(long)]
        json: bool,
    },
    /// Check every stage on a real device: the companion workload traced and judged (root).
    #[command(
        long_about = "Run the companion workload (rdma-trace-workload, beside rdma-trace) on a device, \
traced, and check every stage the TUI would show: which probes fired and which did not, every MR joined \
with its pages, keys and the memlock limit, every mapping named (on mlx5, each doorbell page \
write-combining or uncached), the completion path and the context its handler ran in, and loss. A check \
that cannot run on the device (soft-RoCE has no doorbell page and no interrupt) is named as not run, with \
why. Ends with one verdict line and writes a small JSON report (kernel, driver, firmware, results; no \
addresses) to attach to a bug report. Exit status: 0 pass, 1 a check failed, 2 the run could not be made."
    )]
    Selftest {
        /// The RDMA device [default: the first in /sys/class/infiniband].
        #[arg(long)]
        device: Option<String>,
        /// GID index of the companion's loopback connection (RoCE: one with an IPv4-mapped
        /// address; an InfiniBand port is refused for now: the companion connects by GID).
        #[arg(long, default_value_t = 1)]
        gid_index: u32,
        /// Where the report goes.
        #[arg(short, long, default_value = "rdma-trace-selftest.json")]
        output: PathBuf,
    },
    /// Join a capture into the story of each verbs program: calls, kernel work, completions.
    #[command(long_about = "Read a capture (from `trace -o`) and join it: every event is attributed to \
a process — completion events through the CQ they were raised on (their user handle is the program's \
`struct ibv_cq *`), never by the kworker, softirq or system call that ran them —, kernel work is nested inside the \
libibverbs call that caused it, and completions are paired with the channel read that woke the program \
(wakeup latency). The companion workload's steps — announced through its `rdma_trace_step` marker \
while it was traced, so in the capture, or from `--steps` (its announce file) — are each joined to the \
kernel events they caused and their values checked against theirs.")]
    Story {
        /// A capture (`trace -o`), or `-` for stdin.
        capture: PathBuf,
        /// The companion workload's step records (`rdma-trace-workload --announce FILE`), for
        /// a capture made without its marker; steps the capture carries are not joined twice.
        #[arg(long, value_name = "FILE")]
        steps: Option<PathBuf>,
        /// Print the joined story as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        read: ReadOpts,
    },
    /// Print a capture (from `trace -o`; a file, a FIFO or `-`) as the text stream.
    Replay {
        /// The capture: plain or zstd, a FIFO, or `-` for stdin.
        file: PathBuf,
        /// Print kernel stacks under control-path events.
        #[arg(long)]
        stacks: bool,
        #[command(flatten)]
        read: ReadOpts,
    },
    /// One real occurrence of a path, explained stage by stage with its values.
    #[command(long_about = "Walk through one real occurrence of a path, from a capture or from a command \
traced here (root): the user call, the system call, the uverbs dispatch, the provider and the core work, each \
with the values seen, the kernel functions that did it (with their source files, as that kernel's stacks show \
them) and why. Topics: mr (pinning and RLIMIT_MEMLOCK; a refused pin is explained with the limit and the size \
asked), mmap (doorbell and queue pages; what the offset encodes), cq (interrupt or worker → completion event → \
the program's wakeup), bypass (the data phase's syscalls per work request: soft-RoCE's write(2) doorbell \
against a NIC's MMIO store), fork (MADV_DONTFORK and copy-on-fork). The TUI shows the same with `e`.")]
    Explain(ExplainArgs),
    /// The numbers of one or more captures: per path, per process, the data phase, loss.
    #[command(long_about = "The aggregates `story` does not give, in one place: per path (pinning, mmap, \
completion events, teardown) how many and how long (percentiles and a histogram of the function that does \
the work), the wakeup latency from a completion event to the channel read, the most frequent kernel stacks \
per path, per process the pins, the peak bytes pinned against RLIMIT_MEMLOCK and the pins refused, the \
data phase's syscalls per completion event (and per work request when the companion's steps are in the \
capture), and the loss each capture accounts for. Several captures (both peers of a test) are merged on the \
wall clock from their headers. `story` tells each process's story; `report` counts. --json gives the \
schema of docs/report.md, for scripts; `rdma-trace diff` compares two runs.")]
    Report {
        /// Captures (`trace -o`), plain or zstd.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The report as JSON (docs/report.md).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        read: ReadOpts,
    },
    /// Compare two captures' reports; fail on thresholds (for CI).
    #[command(long_about = "Compare the reports of two captures: per-path counts and latency percentiles, \
bytes and pages pinned, completions, syscalls per completion event and per work request, loss, and the kernel \
stacks new in B or gone from it. --fail-on NAME=+N% (B may exceed A by at most N %), NAME=-N% (may fall short \
by at most N %), or +N/-N (absolute) makes the exit status 1 when broken: e.g. --fail-on pin-p99=+20%. \
Metric names: pin-events, pin-p50, pin-p99, pin-pages, mmap-…, completion-…, teardown-…, wakeup-p50, \
wakeup-p99, pinned-peak-bytes, refused-pins, completions (completion events on every CQ, as \
completion-events), syscalls-per-completion, syscalls-per-wr, lost. Exit status: 0 within every threshold, \
1 a threshold broken, 2 bad input (an unreadable capture, an unknown metric).")]
    Diff {
        /// The capture to compare against (the baseline).
        a: PathBuf,
        /// The capture compared (a threshold says how far B may move from A).
        b: PathBuf,
        /// A threshold (repeat, or separate with commas).
        #[arg(long = "fail-on", value_name = "NAME=±N[%]", value_delimiter = ',')]
        fail_on: Vec<String>,
        /// The comparison as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        read: ReadOpts,
    },
    /// Pictures of a capture: a Perfetto timeline, folded kernel stacks, a flame graph.
    Export {
        /// Captures (several are merged on the wall clock).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Chrome trace-event JSON for Perfetto's UI (ui.perfetto.dev) or chrome://tracing.
        #[arg(long, value_name = "OUT.json")]
        perfetto: Option<PathBuf>,
        /// Kernel stacks per path, folded (`path;outermost;…;innermost count`).
        #[arg(long, value_name = "OUT")]
        folded: Option<PathBuf>,
        /// The folded stacks drawn as a flame graph.
        #[arg(long, value_name = "OUT.svg")]
        flamegraph: Option<PathBuf>,
        #[command(flatten)]
        read: ReadOpts,
    },
    /// Not for people: the helper a stopped live run starts to detach its probes after it
    /// has exited (`live/detach.rs`).
    #[command(name = DETACH_HELPER, hide = true)]
    DetachAfterExit {
        /// The read end of a pipe whose writer is the run: its end means the run exited.
        #[arg(long)]
        wait_fd: i32,
        /// The tracefs `kprobe_events` the return probes are in (none: no return probes).
        #[arg(long)]
        events_file: Option<PathBuf>,
        /// The return probes' events (`group/name`), removed once detached.
        events: Vec<String>,
    },
}

/// `tui`: a live run, a daemon's stream, or a capture, on screen.
#[derive(clap::Args)]
pub struct TuiArgs {
    /// At exit, the screen's own account: frames drawn, keys answered and how fast.
    #[arg(long)]
    pub verbose: bool,
    /// A capture to replay (plain or zstd).
    #[arg(conflicts_with_all = ["connect", "probes", "pids", "command"])]
    pub file: Option<PathBuf>,
    /// Show a daemon's stream (`rdma-trace daemon`): its socket, or
    /// `ssh://[USER@]HOST[:PORT][/SOCKET]` for one on another host (over your own ssh, which runs `rdma-trace trace
    /// --connect SOCKET -o -` there; `RDMA_TRACE_SSH` is the ssh command, like
    /// `GIT_SSH_COMMAND`). A capture file or `-` is read as a source too (at once, with no
    /// replay clock). Repeat for several sources (one per host, say both ends of a
    /// connection) on one screen: each host's processes are kept apart and named with their
    /// host, and the others' events are placed on the first's clock by the offset their
    /// daemons measured (`daemon --clock-peer`).
    #[arg(long, value_name = "SOCKET", conflicts_with_all = ["probes", "pids", "command"])]
    pub connect: Vec<PathBuf>,
    /// Only these probes (live); repeatable.
    #[arg(long = "probe", value_name = "ID")]
    pub probes: Vec<String>,
    /// Also watch this process's verbs-related syscalls (live); repeatable.
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Run this command under the tracer (its output goes to a log file, not the screen).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `daemon`: trace for as long as asked and serve subscribers.
#[derive(clap::Args)]
pub struct DaemonArgs {
    /// The Unix socket subscribers connect to.
    #[arg(long, default_value = crate::serve::socket::DEFAULT_SOCKET, value_name = "PATH")]
    pub socket: PathBuf,
    /// Also serve the host through this QEMU virtio-serial port (`/dev/virtio-ports/NAME`):
    /// its one peer is the host, through a socket the host user owns.
    #[arg(long, value_name = "PATH")]
    pub virtio_port: Option<PathBuf>,
    /// Also let this uid subscribe (repeatable); the socket is then mode 0666 and the
    /// kernel's peer credentials decide.
    #[arg(long = "allow-uid", value_name = "UID")]
    pub allow_uids: Vec<u32>,
    /// Send kernel addresses (struct pointers, page frame numbers) to subscribers that are
    /// not root too. Without it they get stand-ins, the same for the same value throughout
    /// (as `trace --redact`), so every join still holds.
    #[arg(long)]
    pub show_kernel_addresses: bool,
    /// Only these probes (ids from `rdma-trace probes`); repeatable. Default: all.
    #[arg(long = "probe", value_name = "ID")]
    pub probes: Vec<String>,
    /// Also write the whole stream to this capture file (as `trace -o`). Should writing it
    /// fail (a full disk), the daemon says so, on stderr, to its subscribers (a loss record of
    /// `output capture`) and in its metrics, and serves on without the file.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// With -o FILE: start a new file once this one holds SIZE bytes (K, M, G suffixes), as
    /// `trace --max-size`: each file starts with the header and ends with a trailer.
    #[arg(long, value_name = "SIZE")]
    pub max_size: Option<String>,
    /// With --max-size: keep only the newest N files (a daemon left running for days).
    #[arg(long, value_name = "N")]
    pub rotate: Option<u32>,
    /// Serve Prometheus metrics (text format) over HTTP on ADDR: bytes pinned per process
    /// against its memlock limit, MR registrations and refusals, pin and wakeup latency
    /// histograms, completions per process and context, events lost per probe and reason.
    /// Anyone who can reach ADDR can read them (no access control: process names and pids,
    /// no kernel addresses); the default binds the loopback only, so bind wider only where
    /// the network is yours (`--metrics 0.0.0.0:9464`).
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:9464")]
    pub metrics: Option<String>,
    /// Count in the kernel and stream nothing: each kernel probe's hits per process, the
    /// pins (bytes pinned now and at most, registrations, refusals, pin latency), the
    /// completions by context and the wakeup latency are aggregated in BPF maps and served
    /// as the same metrics, read every 800 ms. For an always-on daemon that only feeds
    /// Prometheus: no libibverbs uprobes, no syscalls, no records to subscribers or `-o`
    /// (they get the header, stats and the trailer). Needs `--metrics`.
    #[arg(long, requires = "metrics")]
    pub metrics_only: bool,
    /// Measure another host's clock against this one's before tracing: the peer daemon's
    /// metrics address (`HOST:PORT`, its `--metrics`), asked NTP-style for its wall clock.
    /// The offset and its error bar go into the capture's header; `report` and `export`
    /// place that host's events by it. Repeat for several peers.
    #[arg(long = "clock-peer", value_name = "HOST:PORT")]
    pub clock_peers: Vec<String>,
    /// Stop after this many seconds.
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Ring buffer size in KiB (a power of two, at least 4).
    #[arg(long, default_value_t = 4096, value_name = "KIB")]
    pub ring_kib: u32,
    /// Instances per kernel return probe (see `trace --kretprobe-instances`).
    #[arg(long, default_value_t = crate::live::kprobe_events::DEFAULT_INSTANCES, value_name = "N")]
    pub kretprobe_instances: u32,
    /// Records a subscriber may fall behind by (its queue) before it loses records; it is
    /// then told how many, and nobody else waits for it.
    #[arg(long, default_value_t = crate::serve::QUEUE, value_name = "RECORDS", value_parser = at_least_one)]
    pub subscriber_queue: usize,
}

/// `explain`: one topic taught from a capture's own numbers, or from a fresh run.
#[derive(clap::Args)]
pub struct ExplainArgs {
    #[arg(value_enum)]
    pub topic: crate::explain::lessons::Topic,
    /// A capture (`trace -o`); or give a command after `--` to trace it here. Several
    /// captures (one per host, both ends of a connection) are merged as `report` merges
    /// them: `cq` then begins at the post on the other host.
    pub files: Vec<PathBuf>,
    /// The companion's step records, for a capture made without its marker.
    #[arg(long, value_name = "FILE")]
    pub steps: Option<PathBuf>,
    /// The explanation as JSON (its values by name, the functions it names).
    #[arg(long)]
    pub json: bool,
    /// Keep at most this many events, the run's first: what is explained is the first
    /// occurrence of the path, and its counts are of the events kept. A longer run is
    /// still read to its end, and the explanation says how much of it was kept.
    #[arg(long, value_name = "N", default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_events: u64,
    /// A command to run and trace (its syscalls watched), then explain.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// How a capture is read (plain or zstd, recognised by content).
#[derive(clap::Args, Clone, Copy)]
pub struct ReadOpts {
    /// Fail on the first damaged line instead of skipping (and naming) it.
    #[arg(long)]
    pub strict: bool,
    /// Keep reading a capture that is still being written, until its trailer (a plain
    /// file; not zstd).
    #[arg(long, short = 'f')]
    pub follow: bool,
}

/// `trace`: attach, print the text stream, write a capture.
#[derive(clap::Args)]
pub struct TraceArgs {
    /// Only these probes (ids from `rdma-trace probes`); repeatable. Default: all.
    #[arg(long = "probe", value_name = "ID")]
    pub probes: Vec<String>,
    /// Also watch this process's verbs-related syscalls; repeatable.
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Write the capture stream (format v1, docs/event-format.md) to this file (mode 0600;
    /// zstd if it ends in .zst), or to stdout with `-`: a header, every event, stats every
    /// 800 ms, loss notices, a trailer; written out every 50 ms.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// With -o FILE: start a new file once this one holds SIZE bytes (K, M, G suffixes), as
    /// tcpdump -C. Each file is whole: it starts with the header and ends with a trailer.
    /// Files after the first are FILE with a number before its extensions (run.1.jsonl.zst).
    #[arg(long, value_name = "SIZE")]
    pub max_size: Option<String>,
    /// With --max-size: keep only the newest N files, as tcpdump -W.
    #[arg(long, value_name = "N")]
    pub rotate: Option<u32>,
    /// Replace kernel addresses (struct pointers, page frame numbers) with stand-ins in
    /// every output, for a capture to share: the same address gets the same stand-in, so
    /// the story still joins. Stacks are symbols already; user-space addresses stay. With
    /// --connect, the daemon is asked for its stream so (a subscriber that is not root gets
    /// it so anyway, unless the daemon runs with --show-kernel-addresses).
    #[arg(long)]
    pub redact: bool,
    /// Stop after this many seconds.
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Print the kernel stack under each control-path event.
    #[arg(long)]
    pub stacks: bool,
    /// Don't print the text stream (useful with -o).
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// At the end, print the joined story (see `rdma-trace story`).
    #[arg(long)]
    pub story: bool,
    /// With --story: the companion workload's step records, read at the end (steps its
    /// marker announced during the run are joined already, and not twice).
    #[arg(long, value_name = "FILE")]
    pub steps: Option<PathBuf>,
    /// Ring buffer size in KiB (a power of two, at least 4).
    #[arg(long, default_value_t = 4096, value_name = "KIB")]
    pub ring_kib: u32,
    /// Instances per kernel return probe: how many calls of one function can be followed
    /// at once (a thread blocked in a probed call holds one). A call that finds none is
    /// counted as "missed by the kernel". At most 4096.
    #[arg(long, default_value_t = crate::live::kprobe_events::DEFAULT_INSTANCES, value_name = "N")]
    pub kretprobe_instances: u32,
    /// Kernel stacks by id: the kernel keeps each distinct stack in a map
    /// (`bpf_get_stackid`, up to 4096 of them) and a record carries its id, not its
    /// frames. Smaller records; a stack whose map bucket is taken is counted as not taken.
    /// See docs/performance.md for what it costs and saves.
    #[arg(long)]
    pub stack_ids: bool,
    /// Show a daemon's stream instead of tracing here (`rdma-trace daemon`): no root or
    /// RDMA needed. With -o the stream is also written to a capture file. SOCKET may be
    /// `ssh://[USER@]HOST[:PORT][/SOCKET]` (a daemon on another host, over your own ssh), a
    /// capture file or `-`. Repeat for several (one per host): one stream on the first's
    /// clock, each line led by its host (without -o or --story, which take one).
    #[arg(long, value_name = "SOCKET", conflicts_with_all = ["probes", "pids", "command"])]
    pub connect: Vec<PathBuf>,
    /// Run this command under the tracer and watch its syscalls from its first one. It runs
    /// as the user who ran sudo (SUDO_UID), not as root, unless --user says otherwise;
    /// rdma-trace exits with its status (128+N for a signal), and SIGINT, SIGTERM and
    /// --duration reach it.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
    /// The user CMD runs as (a name or a uid; `root` to keep root, whose CAP_IPC_LOCK lifts
    /// the memlock limit that pinning is charged to).
    #[arg(long, value_name = "USER", requires = "command")]
    pub user: Option<String>,
}

/// Why a count given on the command line is refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CountError {
    #[error("0 records could hold nothing: give 1 or more")]
    Zero,
    #[error("{0:?}: {1}")]
    NotANumber(String, std::num::ParseIntError),
}

/// A count that must be 1 or more (a queue of none holds nothing).
fn at_least_one(s: &str) -> Result<usize, CountError> {
    match s.parse::<usize>() {
        Ok(0) => Err(CountError::Zero),
        Ok(n) => Ok(n),
        Err(e) => Err(CountError::NotANumber(s.to_string(), e)),
    }
}
