//! Types shared by the eBPF programs and the userspace daemon.
//!
//! Everything here is `#[repr(C)]` plain data with a size assert, so both sides agree
//! byte for byte. Userspace decodes events with a length check and `read_unaligned`
//! (see `rdma-trace/src/decode.rs`), never by transmuting.
#![no_std]

/// Kernel probe slots. One kprobe and one kretprobe program serve every kprobe slot: the
/// function's address (`bpf_get_func_ip`) is looked up in `FUNC_SLOTS` (loading one
/// program per slot cost ~190 ms of verification each under TCG). Slots 22 and 23 are
/// the tracepoint slots.
pub const MAX_SLOTS: usize = 24;
/// Values one probe event can carry (arguments, fields behind them, the return value).
pub const MAX_FETCH: usize = 8;
/// Pointer hops one fetch may take (e.g. `cq->uobject->user_handle` is two).
pub const MAX_HOPS: usize = 3;
/// Kernel stack frames kept per control-path event.
pub const MAX_STACK: usize = 32;

/// User-space probe slots (uprobes on libibverbs), numbered after the kernel slots:
/// slot ids `MAX_SLOTS..TOTAL_SLOTS`. One uprobe and one uretprobe program serve them
/// all; the attach cookie carries the slot id.
pub const MAX_USER_SLOTS: usize = 8;
pub const TOTAL_SLOTS: usize = MAX_SLOTS + MAX_USER_SLOTS;

/// Plans and counters are indexed by "site": the entry side of slot `s` is site `s`,
/// its return side is site `TOTAL_SLOTS + s`.
pub const SITES: usize = 2 * TOTAL_SLOTS;
pub const fn return_site(slot: usize) -> usize {
    TOTAL_SLOTS + slot
}
/// Counter sites after the probe sites: the syscall tracepoints, and the fork follower
/// (its hits are forks of watched processes; `CNT_NO_SCRATCH` there counts children that
/// could not be watched because the watch table was full).
pub const SITE_SYS_ENTER: usize = SITES;
pub const SITE_SYS_EXIT: usize = SITES + 1;
pub const SITE_FORK: usize = SITES + 2;
/// The companion's step marker (`rdma_trace_step` in `rdma-trace-workload`): its hits are
/// steps announced; `CNT_NO_SCRATCH` there counts steps that found no scratch record.
pub const SITE_STEP: usize = SITES + 3;
/// The in-kernel watch (`SlotPlan::watch`): its hits are processes added to the watch
/// table by their first verbs entry; `CNT_NO_SCRATCH` there counts those the table, full,
/// had no room for.
pub const SITE_WATCH: usize = SITES + 4;
pub const COUNTER_SITES: usize = SITES + 5;

/// Per-site counters (index `site * COUNTERS + reason`), per CPU, bumped atomically
/// (uprobe programs are preemptible: two runs on one CPU may interleave).
pub const CNT_HITS: usize = 0;
/// The ring buffer was full: the event is lost.
pub const CNT_RINGBUF_FULL: usize = 1;
/// A field read failed (the event is kept, the field is marked).
pub const CNT_READ_FAILED: usize = 2;
/// The kernel stack could not be captured (the event is kept without it).
pub const CNT_STACK_FAILED: usize = 3;
/// No scratch record could be had (the per-CPU scratch lookup failed; at the fork
/// follower: the watch table was full): the event is lost.
pub const CNT_NO_SCRATCH: usize = 4;
/// Nanoseconds spent building records (reads, stack) before they were written to the
/// ring: the sum, the largest one, and how many took over `SLOW_BUILD_NS`. Records are
/// built outside the ring, so this time never holds the ring; it is what a design that
/// reserved first would have held a reservation for.
pub const CNT_BUILD_NS_SUM: usize = 5;
pub const CNT_BUILD_NS_MAX: usize = 6;
pub const CNT_BUILD_SLOW: usize = 7;
/// Counting runs only (`SlotPlan::agg`): a table of the counts was full, so the hit, or
/// what it charges (pinned bytes, a latency), was not counted.
pub const CNT_COUNT_FULL: usize = 8;
/// Counting runs only: the hit's partner was never seen, so what it charges has no one to
/// go to: a completion on a CQ made before the run, a pin return or a release whose pin
/// began before it, a wakeup with no completion waiting.
pub const CNT_NOT_JOINED: usize = 9;
pub const COUNTERS: usize = 10;
pub const COUNTER_ENTRIES: usize = COUNTER_SITES * COUNTERS;
pub const SLOW_BUILD_NS: u64 = 1_000_000;

/// Event kinds (first byte after the header's fixed part tells the layout).
pub const KIND_PROBE_ENTRY: u8 = 1;
pub const KIND_PROBE_RETURN: u8 = 2;
pub const KIND_SYS_ENTER: u8 = 3;
pub const KIND_SYS_EXIT: u8 = 4;
pub const KIND_STEP: u8 = 5;

/// Where a fetch starts.
pub const SRC_NONE: u8 = 0;
/// Argument `n` of the probed function: `SRC_ARG0 + n`, n in 0..=7 (6 and 7 are read
/// from the stack on x86-64).
pub const SRC_ARG0: u8 = 1;
/// The return value (return programs only).
pub const SRC_RET: u8 = 20;
/// The tracepoint record itself (tracepoint programs only).
pub const SRC_CTX: u8 = 21;
/// The current task (`struct task_struct *`, `bpf_get_current_task`): what the probed
/// call runs on behalf of, read at the moment of the hit (its limits, its mm's counters).
pub const SRC_TASK: u8 = 22;
/// Not a plan's source: at a kernel function's entry, the return address into its caller
/// where the architecture keeps it in a register (arm64's x30), for the programs to put
/// into the stack, whose walk from the entry's registers misses that frame.
pub const SRC_CALLER: u8 = 23;

/// Header common to every event.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventHeader {
    /// bpf_ktime_get_ns (CLOCK_MONOTONIC).
    pub ts_ns: u64,
    pub tgid: u32,
    pub tid: u32,
    pub comm: [u8; 16],
    pub cpu: u32,
    pub kind: u8,
    /// Probe slot (probe events) or 0.
    pub slot: u8,
    /// Bit i: fetch i could not be read.
    pub fail_mask: u8,
    /// Bit i: fetch i was not dereferenced because its base was NULL or an ERR_PTR.
    pub skip_mask: u8,
    /// bpf_get_current_cgroup_id: the cgroup v2 of the task the event ran in (the inode
    /// number of its directory under /sys/fs/cgroup), which names a container.
    pub cgroup_id: u64,
}
pub const HEADER_LEN: usize = 48;
const _: () = assert!(core::mem::size_of::<EventHeader>() == HEADER_LEN);

/// A kprobe/kretprobe hit: the values its fetch plan read, and (entry) the kernel stack.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ProbeEvent {
    pub hdr: EventHeader,
    pub vals: [u64; MAX_FETCH],
    /// Bytes of `stack` filled (a multiple of 8), 0 when no stack was taken.
    pub stack_len: u32,
    /// `SlotPlan::stack == STACK_ID`: the stack's id in `STACKS`, plus one (0: none).
    pub stack_id: u32,
    pub stack: [u64; MAX_STACK],
}
const _: () = assert!(core::mem::size_of::<ProbeEvent>() == HEADER_LEN + 64 + 8 + 256);
/// A probe record is written without the unused part of its stack: this fixed part plus
/// `stack_len` bytes.
pub const PROBE_FIXED_LEN: usize = HEADER_LEN + 64 + 8;

/// The fixed part of a `ProbeEvent` (same layout as its first `PROBE_FIXED_LEN` bytes):
/// a record without a stack. Uprobe programs build it on their own BPF stack.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ProbeHead {
    pub hdr: EventHeader,
    pub vals: [u64; MAX_FETCH],
    pub stack_len: u32,
    pub stack_id: u32,
}
const _: () = assert!(core::mem::size_of::<ProbeHead>() == PROBE_FIXED_LEN);
const _: () = assert!(core::mem::offset_of!(ProbeEvent, stack) == PROBE_FIXED_LEN);

/// A syscall of a watched process: enter carries the arguments, exit the return value
/// in `args[0]`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SyscallEvent {
    pub hdr: EventHeader,
    pub nr: u64,
    pub args: [u64; 6],
    /// open/openat entry: the path opened (NUL-terminated, truncated); zeros otherwise.
    /// With the returned fd it tells which fd is the uverbs device, exactly, at the time.
    pub path: [u8; PATH_LEN],
}
pub const PATH_LEN: usize = 64;
const _: () = assert!(core::mem::size_of::<SyscallEvent>() == HEADER_LEN + 8 + 48 + PATH_LEN);

/// A companion step, announced through its `rdma_trace_step(rec, len)` marker: the JSON
/// step record (docs/workload.md) read from the workload's memory at that moment.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct StepEvent {
    pub hdr: EventHeader,
    /// Bytes of `json` filled: at most `STEP_JSON_MAX`.
    pub len: u32,
    /// The length the workload passed (larger than `len`: the record was cut).
    pub asked: u32,
    pub json: [u8; STEP_JSON_MAX],
}
/// The longest step record carried whole (the lab's longest is 377 bytes: the `start`
/// record, which names the announce file).
pub const STEP_JSON_MAX: usize = 1024;
/// A step record is written without the unused part of `json`.
pub const STEP_FIXED_LEN: usize = HEADER_LEN + 8;
const _: () = assert!(core::mem::size_of::<StepEvent>() == STEP_FIXED_LEN + STEP_JSON_MAX);
const _: () = assert!(core::mem::offset_of!(StepEvent, json) == STEP_FIXED_LEN);

/// One value to read: start at `src`, follow `hops` pointers (offsets added before each
/// read; all but the last read 8 bytes), the last read is `size` bytes.
/// `hops == 0` takes the source value itself.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fetch {
    pub src: u8,
    pub hops: u8,
    pub size: u8,
    pub _pad: u8,
    pub offsets: [u32; MAX_HOPS],
}
const _: () = assert!(core::mem::size_of::<Fetch>() == 16);

/// What a probe slot reads, resolved in userspace from BTF at load time.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotPlan {
    pub fetches: [Fetch; MAX_FETCH],
    /// Number of fetches used.
    pub n: u8,
    /// How to take the kernel stack (entry only): `STACK_NONE`, `STACK_COPY` or `STACK_ID`.
    pub stack: u8,
    /// 1 when this slot is attached (unattached slots emit nothing).
    pub active: u8,
    /// 1 when the pointers followed are user-space addresses (uprobes).
    pub user: u8,
    /// 1 when an entry hit adds its process (tgid) to the watch table, so its syscalls are
    /// seen from that moment (the daemon marks the verbs entries: opening a device,
    /// mapping, pinning), not from the tracer's next tick.
    pub watch: u8,
    /// What a hit does with what it read: `AGG_STREAM` (a record to the ring) or, for a
    /// run that only counts (`daemon --metrics-only`), one of the other `AGG_*`.
    pub agg: u8,
    /// The `vals` indexes the `AGG_*` reads (see each).
    pub agg_a: u8,
    pub agg_b: u8,
}
const _: () = assert!(core::mem::size_of::<SlotPlan>() == 16 * MAX_FETCH + 8);

/// `SlotPlan::agg`: the hit's record goes to the ring.
pub const AGG_STREAM: u8 = 0;
/// The hit is counted per process and probe (`PROC_HITS`); nothing goes to the ring.
pub const AGG_COUNT: u8 = 1;
/// As `AGG_COUNT`, and a pin begins: its time, address (`vals[agg_a]`) and length
/// (`vals[agg_b]`) are kept for the thread's return (`PIN_STARTS`).
pub const AGG_PIN_ENTRY: u8 = 2;
/// As `AGG_COUNT`, and the thread's pin returned the umem `vals[agg_a]`: an ERR_PTR is a
/// refusal; else its whole pages are charged to the process and its latency counted
/// (`PINS`), and the umem remembered (`UMEMS`) for its release.
pub const AGG_PIN_RETURN: u8 = 3;
/// As `AGG_COUNT`, and the umem `vals[agg_a]` is released: its charge leaves its process.
pub const AGG_UNPIN: u8 = 4;

/// As `AGG_COUNT`, and the CQ `vals[agg_a]` is made by this process (`CQ_OWNERS`).
pub const AGG_CQ_MADE: u8 = 5;
/// As `AGG_COUNT`, and a completion event on the CQ `vals[agg_a]`: counted for the CQ's
/// owner by the context it ran in (the slot takes its stack: `SOFTIRQ_FUNCS` tell), and
/// queued for the owner's wakeup (`CQS`).
pub const AGG_COMPLETION: u8 = 6;
/// As `AGG_COUNT`, and this process's channel read returned `vals[agg_a]`: above 0, the
/// oldest completion queued for it woke it.
pub const AGG_WAKEUP: u8 = 7;

/// `ProcCqs::by_context`: where a completion's handler ran, as the story says it
/// (`pipeline::enrich::classify`): in softirq processing (a frame of `SOFTIRQ_FUNCS`), in
/// a kworker (by its name), or in a process.
pub const CTX_PROCESS: usize = 0;
pub const CTX_KWORKER: usize = 1;
pub const CTX_SOFTIRQ: usize = 2;
/// Address ranges `[start, end)` of the kernel functions that mark softirq processing.
pub const SOFTIRQ_FUNCS: usize = 16;
/// Completions a process may have waiting for its wakeup; past that the oldest's time is
/// overwritten (its wakeup latency reads short).
pub const PENDING: usize = 16;

/// A process's completions and wakeups, counted in the kernel (`CQS`, by the CQ owner's
/// tgid; atomic adds).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ProcCqs {
    pub by_context: [u64; 3],
    /// Completions queued and wakeups taken: the waiting ones are `pending[popped..pushed]`
    /// (modulo `PENDING`), their handlers' times.
    pub pushed: u64,
    pub popped: u64,
    pub pending: [u64; PENDING],
    pub wakeup_sum_ns: u64,
    /// Per bucket of `LATENCY_BUCKETS_NS`, the last for larger values (not cumulative).
    pub wakeup: [u64; LATENCY_BUCKETS_NS.len() + 1],
}

impl Default for ProcCqs {
    fn default() -> Self {
        Self {
            by_context: [0; 3],
            pushed: 0,
            popped: 0,
            pending: [0; PENDING],
            wakeup_sum_ns: 0,
            wakeup: [0; LATENCY_BUCKETS_NS.len() + 1],
        }
    }
}

/// The latency buckets' upper bounds (ns), 1 µs to 1 s, about three a decade: the
/// Prometheus histograms' `le`, for counted and streamed runs alike.
pub const LATENCY_BUCKETS_NS: [u64; 16] = [
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    50_000_000,
    250_000_000,
    1_000_000_000,
];

/// The page a pin charges (x86-64's; the story charges the same).
pub const PIN_PAGE: u64 = 4096;

/// `PROC_HITS`'s key: a process and a site.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcSite {
    pub tgid: u32,
    pub site: u32,
}

/// A pin under way (`PIN_STARTS`, by pid_tgid).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PinStart {
    pub ts_ns: u64,
    pub addr: u64,
    pub len: u64,
}

/// What a live umem charges, and to whom (`UMEMS`, by umem).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Charge {
    pub tgid: u32,
    pub _pad: u32,
    pub bytes: u64,
}

/// A process's pins, counted in the kernel (`PINS`, by tgid; atomic adds: one entry for
/// every CPU). `pinned` is what live umems charge now (a release on another CPU may run
/// first: read it as signed).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ProcPins {
    pub pinned: u64,
    pub peak: u64,
    pub pins: u64,
    pub refused: u64,
    pub latency_sum_ns: u64,
    /// Per bucket of `LATENCY_BUCKETS_NS`, the last for larger values (not cumulative).
    pub latency: [u64; LATENCY_BUCKETS_NS.len() + 1],
}

impl Default for ProcPins {
    fn default() -> Self {
        Self {
            pinned: 0,
            peak: 0,
            pins: 0,
            refused: 0,
            latency_sum_ns: 0,
            latency: [0; LATENCY_BUCKETS_NS.len() + 1],
        }
    }
}

/// `SlotPlan::stack`: no stack.
pub const STACK_NONE: u8 = 0;
/// The stack's return addresses are copied into the record (`stack_len` bytes).
pub const STACK_COPY: u8 = 1;
/// The kernel keeps the stack in the `STACKS` map (`bpf_get_stackid`) and the record
/// carries its id (`stack_id`); userspace looks each new id up once.
pub const STACK_ID: u8 = 2;
/// Entries of `STACKS` when stacks go by id (it is created with one entry otherwise).
pub const STACK_IDS: u32 = 4096;

/// Byte offsets inside the `raw_syscalls` tracepoint records, read from tracefs
/// `format` files at load time.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyscallLayout {
    pub enter_id: u32,
    pub enter_args: u32,
    pub exit_id: u32,
    pub exit_ret: u32,
    /// `sched:sched_process_fork`: where parent_pid and child_pid are (children of a
    /// watched process are watched too).
    pub fork_parent: u32,
    pub fork_child: u32,
    /// This architecture's open and openat numbers (their path argument is read).
    pub nr_open: u32,
    pub nr_openat: u32,
}

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: all of these are #[repr(C)] structs of integers and arrays of integers,
    // with explicit padding fields: every bit pattern is valid, no implicit padding.
    unsafe impl aya::Pod for EventHeader {}
    // SAFETY: as above (size asserted with the struct).
    unsafe impl aya::Pod for Fetch {}
    // SAFETY: as above (size asserted with the struct).
    unsafe impl aya::Pod for SlotPlan {}
    // SAFETY: as above (size asserted with the struct).
    unsafe impl aya::Pod for SyscallLayout {}
    // SAFETY: as above (two u32s; three u64s; a u32 pair and a u64; u64s).
    unsafe impl aya::Pod for ProcSite {}
    // SAFETY: as above.
    unsafe impl aya::Pod for PinStart {}
    // SAFETY: as above.
    unsafe impl aya::Pod for Charge {}
    // SAFETY: as above.
    unsafe impl aya::Pod for ProcPins {}
    // SAFETY: as above (u64s only).
    unsafe impl aya::Pod for ProcCqs {}
}
