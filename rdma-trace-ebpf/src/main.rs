//! rdma-trace's eBPF programs.
//!
//! * `kprobe_entry` / `kprobe_return`: one kprobe and one kretprobe program, attached to
//!   every probed kernel function; the function's address picks its slot (`FUNC_SLOTS`),
//!   whose fetch plan (which arguments, which fields behind them, at offsets resolved from
//!   BTF at load time) userspace wrote into `PLANS`.
//! * `sys_enter` / `sys_exit`: the `raw_syscalls` tracepoints, filtered to the watched
//!   processes (`TARGETS`, by tgid or tid) and syscalls (`SYSCALLS`).
//! * `tp_22` / `tp_23`: kernel tracepoints (e.g. `rdma_core:mr_dereg`), fields read from
//!   the record at offsets taken from its tracefs `format`.
//!
//! Every hit and every loss is counted per slot in `STATS` (per CPU, atomic adds):
//! ring-buffer failures, scratch shortage, failed field reads, failed stack captures,
//! and the time spent building records.
//!
//! No program holds a ring-buffer reservation while it works. A record is built first and
//! written with one `bpf_ringbuf_output`: kernel-context programs (preemption off, never
//! nested on a CPU) build in a per-CPU scratch record; uprobe programs, which the kernel
//! may preempt (two can interleave on one CPU), build their stackless record in a scratch
//! entry of their own thread (`USCRATCH`; kept until the thread exits once `sched_exit`
//! runs, `EXIT_PRUNES`). A reservation held across reads and a stack
//! walk made every record behind it wait while its producer was preempted (seen on 7.x
//! full-preemption kernels).
#![no_std]
#![no_main]
// Atomic adds: the BPF target has no `AtomicU64::fetch_add`; the intrinsic lowers to the
// BPF atomic add instruction.
#![cfg_attr(target_arch = "bpf", feature(core_intrinsics))]
#![cfg_attr(target_arch = "bpf", allow(internal_features))]

use aya_ebpf::{
    EbpfContext,
    btf_maps::StackTrace,
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_current_task, bpf_get_smp_processor_id,
        bpf_ktime_get_ns, bpf_probe_read_kernel, bpf_probe_read_user, bpf_probe_read_user_str_bytes,
        generated::{bpf_get_attach_cookie, bpf_get_current_cgroup_id, bpf_get_func_ip, bpf_get_stack},
    },
    macros::{btf_map, kprobe, kretprobe, map, tracepoint, uprobe, uretprobe},
    maps::{Array, HashMap, LruHashMap, PerCpuArray, PerCpuHashMap, ProgramArray, RingBuf},
    programs::{ProbeContext, RetProbeContext, TracePointContext, tracing::StackIdContext},
};
use core::ptr::read_volatile;
use rdma_trace_common::*;

/// Default 4 MiB; userspace may resize it at load time.
#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(4 * 1024 * 1024, 0);

/// Kernel stacks by id, for slots whose plan says `STACK_ID`. One entry unless userspace
/// asks for stacks by id (then `STACK_IDS`). Entries are never removed: an id stays the
/// same stack for the run, and a new stack whose bucket is taken is counted as not taken.
/// `MAX_STACK` frames deep, as a copied stack (a BTF map: the legacy one is 127 deep, and
/// the kernel refuses it where `kernel.perf_event_max_stack` is lower).
#[btf_map]
static STACKS: StackTrace<1, 0, MAX_STACK> = StackTrace::new();

#[map]
static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(COUNTER_ENTRIES as u32, 0);

#[map]
static PLANS: Array<SlotPlan> = Array::with_max_entries(SITES as u32, 0);

/// Watched processes: a tgid or a tid. Entries leave when their task exits
/// (`sched_exit`); a child or a verbs user that finds the table full is counted
/// (`SITE_FORK`, `SITE_WATCH`).
#[map]
static TARGETS: HashMap<u32, u8> = HashMap::with_max_entries(8192, 0);

/// Scratch records of kernel-context programs (kprobes, tracepoints): preemption is off
/// while they run and the kernel never nests them on one CPU, so one per CPU suffices.
#[map]
static KSCRATCH: PerCpuArray<ProbeEvent> = PerCpuArray::with_max_entries(1, 0);
#[map]
static SSCRATCH: PerCpuArray<SyscallEvent> = PerCpuArray::with_max_entries(1, 0);

/// Always empty. Since 6.13 the x86 JIT gives KPROBE-type programs that use 64+ bytes of
/// stack one private stack per CPU; uprobe programs are KPROBE-type but preemptible, so two
/// runs on one CPU shared it: one run's record was copied into another's reservation (seen
/// on 7.3: a record duplicated, another lost). A program that may tail-call gets no private
/// stack, so the uprobe programs try a tail call into this empty array first (it fails and
/// they go on, on their task's own stack).
#[map]
static NO_PRIVATE_STACK: ProgramArray = ProgramArray::with_max_entries(1, 0);

/// Keeps the verifier from giving this program a shared per-CPU stack (see
/// `NO_PRIVATE_STACK`).
#[inline(always)]
fn own_stack(ctx: &impl EbpfContext) {
    // SAFETY: a tail call into an empty program array fails and returns.
    unsafe { NO_PRIVATE_STACK.tail_call(ctx, 0) };
}

/// Watched syscall numbers.
#[map]
static SYSCALLS: HashMap<u32, u8> = HashMap::with_max_entries(64, 0);

/// Offsets inside the raw_syscalls tracepoint records (from tracefs `format`).
#[map]
static SYSCALL_LAYOUT: Array<SyscallLayout> = Array::with_max_entries(1, 0);

#[inline(always)]
fn add(site: usize, what: usize, v: u64) {
    let idx = (site * COUNTERS + what) as u32;
    if let Some(p) = STATS.get_ptr_mut(idx) {
        // SAFETY: a valid, aligned per-CPU u64 of the map; the add is atomic against another
        // (preempted) program run on this CPU.
        unsafe { atomic_add(p, v) };
    }
}

/// # Safety
/// `p` is a valid, aligned u64.
#[cfg(target_arch = "bpf")]
#[inline(always)]
unsafe fn atomic_add(p: *mut u64, v: u64) {
    use core::intrinsics::AtomicOrdering;
    // SAFETY: the caller's contract.
    unsafe { core::intrinsics::atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(p, v) };
}

/// The host build (clippy only; the programs never run there).
/// # Safety
/// `p` is a valid, aligned u64.
#[cfg(not(target_arch = "bpf"))]
#[inline(always)]
unsafe fn atomic_add(p: *mut u64, v: u64) {
    // SAFETY: the caller's contract.
    unsafe { core::sync::atomic::AtomicU64::from_ptr(p) }.fetch_add(v, core::sync::atomic::Ordering::Relaxed);
}

#[inline(always)]
fn count(site: usize, what: usize) {
    add(site, what, 1);
}

/// Records how long a record took to build (see `CNT_BUILD_NS_*`). The maximum is a
/// plain compare-and-store: a race between two runs on one CPU may keep the smaller one.
#[inline(always)]
fn count_build(site: usize, ns: u64) {
    add(site, CNT_BUILD_NS_SUM, ns);
    if ns > SLOW_BUILD_NS {
        count(site, CNT_BUILD_SLOW);
    }
    if let Some(p) = STATS.get_ptr_mut((site * COUNTERS + CNT_BUILD_NS_MAX) as u32) {
        // SAFETY: as in `add`; plain (volatile) load and store.
        unsafe {
            if core::ptr::read_volatile(p) < ns {
                core::ptr::write_volatile(p, ns);
            }
        }
    }
}

/// Writes the first `len` bytes of a built record to the ring in one helper call.
#[inline(always)]
fn emit<T>(site: usize, rec: *const T, len: usize) {
    let len = if len > size_of::<T>() { size_of::<T>() } else { len };
    // SAFETY: `rec` points at a built record of `size_of::<T>()` bytes (per-CPU or per-thread
    // scratch in map memory); `len` is bounded by that size.
    let bytes = unsafe { core::slice::from_raw_parts(rec.cast::<u8>(), len) };
    if EVENTS.output::<[u8]>(bytes, 0).is_err() {
        count(site, CNT_RINGBUF_FULL);
    }
}

#[inline(always)]
fn header(kind: u8, slot: u8) -> EventHeader {
    let pid_tgid = bpf_get_current_pid_tgid();
    EventHeader {
        // SAFETY: a helper without arguments, callable from any program.
        ts_ns: unsafe { bpf_ktime_get_ns() },
        tgid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
        comm: bpf_get_current_comm().unwrap_or([0; 16]),
        // SAFETY: a helper without arguments, callable from any program.
        cpu: unsafe { bpf_get_smp_processor_id() },
        kind,
        slot,
        fail_mask: 0,
        skip_mask: 0,
        // SAFETY: a helper without arguments, callable from kprobe, tracepoint and uprobe
        // programs.
        cgroup_id: unsafe { bpf_get_current_cgroup_id() },
    }
}

/// Argument `n` (0-based) at function entry, by the calling convention of the architecture
/// the programs are built for (`bpf_target_arch`, set by aya-build from the tracer's target;
/// `rdma-trace/src/plan/arch.rs` holds the rest of each one's facts).
///
/// x86-64: registers for 0..6, the stack beyond (at entry `sp` points at the return
/// address; argument 7 is the next word).
#[cfg(not(bpf_target_arch = "aarch64"))]
#[inline(always)]
fn entry_arg(ctx: &ProbeContext, n: u8) -> Result<u64, i32> {
    let regs = ctx.regs;
    // SAFETY: `regs` is the kprobe's pt_regs; reads go through bpf_probe_read_kernel.
    unsafe {
        match n {
            0 => bpf_probe_read_kernel(&(*regs).rdi),
            1 => bpf_probe_read_kernel(&(*regs).rsi),
            2 => bpf_probe_read_kernel(&(*regs).rdx),
            3 => bpf_probe_read_kernel(&(*regs).rcx),
            4 => bpf_probe_read_kernel(&(*regs).r8),
            5 => bpf_probe_read_kernel(&(*regs).r9),
            6 | 7 => {
                let sp: u64 = bpf_probe_read_kernel(&(*regs).rsp)?;
                bpf_probe_read_kernel((sp + 8 * (n as u64 - 5)) as *const u64)
            }
            _ => Err(-1),
        }
    }
}

/// arm64 (AAPCS64): arguments 0..8 are x0..x7 (`regs[0..8]`); the catalog reads none
/// beyond.
#[cfg(bpf_target_arch = "aarch64")]
#[inline(always)]
fn entry_arg(ctx: &ProbeContext, n: u8) -> Result<u64, i32> {
    let regs = ctx.regs;
    if n >= 8 {
        return Err(-1);
    }
    // SAFETY: `regs` is the probe's pt_regs; `n` is below the 31 registers it holds.
    unsafe { bpf_probe_read_kernel(&(*regs).regs[n as usize & 7]) }
}

/// ERR_PTR values and NULL are never dereferenced.
#[inline(always)]
fn derefable(p: u64) -> bool {
    (4096..(-4095i64) as u64).contains(&p)
}

#[inline(always)]
fn read_sized<const USER: bool>(addr: u64, size: u8) -> Result<u64, i32> {
    // SAFETY: reads go through the probe-read helpers, which fault safely.
    unsafe {
        if USER {
            return match size {
                1 => bpf_probe_read_user(addr as *const u8).map(u64::from),
                2 => bpf_probe_read_user(addr as *const u16).map(u64::from),
                4 => bpf_probe_read_user(addr as *const u32).map(u64::from),
                _ => bpf_probe_read_user(addr as *const u64),
            };
        }
        match size {
            1 => bpf_probe_read_kernel(addr as *const u8).map(u64::from),
            2 => bpf_probe_read_kernel(addr as *const u16).map(u64::from),
            4 => bpf_probe_read_kernel(addr as *const u32).map(u64::from),
            _ => bpf_probe_read_kernel(addr as *const u64),
        }
    }
}

enum Fetched {
    Value(u64),
    Skipped(u64),
    Failed,
}

#[inline(always)]
fn follow<const USER: bool>(base: u64, f: &Fetch) -> Fetched {
    let hops = f.hops as usize;
    if hops == 0 {
        return Fetched::Value(base);
    }
    let mut addr = base;
    for h in 0..MAX_HOPS {
        if h >= hops {
            break;
        }
        if !derefable(addr) {
            return Fetched::Skipped(addr);
        }
        let at = addr.wrapping_add(f.offsets[h] as u64);
        let size = if h + 1 == hops { f.size } else { 8 };
        match read_sized::<USER>(at, size) {
            Ok(v) => addr = v,
            Err(_) => return Fetched::Failed,
        }
    }
    Fetched::Value(addr)
}

/// Sets bit `i` of a mask in a record.
///
/// # Safety
/// `m` is valid for reads and writes (map memory: the verifier does not track its bytes).
#[inline(always)]
unsafe fn mark(m: *mut u8, i: usize) {
    // SAFETY: the caller's contract.
    unsafe { core::ptr::write_volatile(m, read_volatile(m) | (1 << i)) };
}

/// Fills a record's fixed part from the slot's fetch plan; returns true if a read failed.
///
/// # Safety
/// `h` points at a record in map memory owned by this program run.
#[inline(always)]
unsafe fn fill<const USER: bool>(
    h: *mut ProbeHead,
    plan: &SlotPlan,
    src: impl Fn(u8) -> Result<u64, i32>,
) -> bool {
    let mut failed = false;
    // SAFETY: the caller's contract.
    unsafe {
        (*h).vals = [0; MAX_FETCH];
        (*h).stack_id = 0;
        (*h).stack_len = 0;
        let n = plan.n as usize;
        for i in 0..MAX_FETCH {
            if i >= n {
                break;
            }
            let f = &plan.fetches[i];
            let base = match src(f.src) {
                Ok(v) => v,
                Err(_) => {
                    mark(&raw mut (*h).hdr.fail_mask, i);
                    failed = true;
                    continue;
                }
            };
            match follow::<USER>(base, f) {
                Fetched::Value(v) => core::ptr::write_volatile(&raw mut (*h).vals[i], v),
                Fetched::Skipped(v) => {
                    core::ptr::write_volatile(&raw mut (*h).vals[i], v);
                    mark(&raw mut (*h).hdr.skip_mask, i);
                }
                Fetched::Failed => {
                    mark(&raw mut (*h).hdr.fail_mask, i);
                    failed = true;
                }
            }
        }
    }
    failed
}

/// A kernel-context probe hit: built in this CPU's scratch record (with the stack).
#[inline(always)]
fn kernel_probe_hit(
    site: usize,
    slot: usize,
    kind: u8,
    plan: &SlotPlan,
    ctx: &impl StackIdContext,
    src: impl Fn(u8) -> Result<u64, i32>,
) {
    let Some(ev) = KSCRATCH.get_ptr_mut(0) else {
        count(site, CNT_NO_SCRATCH);
        return;
    };
    // SAFETY: this CPU's scratch record: kernel-context programs run with preemption off
    // and never nest on a CPU, so nothing else writes it until this run ends. The fixed
    // part of a ProbeEvent is laid out as a ProbeHead (asserted in the common crate).
    let stack_len = unsafe {
        (*ev).hdr = header(kind, slot as u8);
        if fill::<false>(ev.cast::<ProbeHead>(), plan, &src) {
            count(site, CNT_READ_FAILED);
        }
        if plan.stack == STACK_COPY {
            let r = bpf_get_stack(ctx.as_ptr(), (*ev).stack.as_mut_ptr().cast(), (MAX_STACK * 8) as u32, 0);
            if r > 0 {
                (*ev).stack_len = r as u32;
                if let Ok(lr) = src(SRC_CALLER) {
                    with_caller(ev, lr);
                }
            } else {
                count(site, CNT_STACK_FAILED);
            }
        } else if plan.stack == STACK_ID {
            match ctx.get_stackid(&STACKS, 0) {
                Ok(id) => {
                    (*ev).stack_id = id as u32 + 1;
                    // The kernel's stack lacks the caller too: the record carries it, as
                    // its one stack word, for userspace to put in (`live/stack_ids.rs`).
                    if let Ok(lr) = src(SRC_CALLER)
                        && !at_trampoline(lr)
                    {
                        (*ev).stack[0] = lr;
                        (*ev).stack_len = 8;
                    }
                }
                Err(_) => count(site, CNT_STACK_FAILED),
            }
        }
        if plan.agg != AGG_STREAM {
            counted::hit(site, plan, ev);
            count_build(site, bpf_ktime_get_ns().wrapping_sub((*ev).hdr.ts_ns));
            return;
        }
        count_build(site, bpf_ktime_get_ns().wrapping_sub((*ev).hdr.ts_ns));
        (*ev).stack_len as usize
    };
    emit(site, ev, PROBE_FIXED_LEN + stack_len);
}

/// `[start, end)` of the kernel's `__kretprobe_trampoline` (userspace writes it from
/// kallsyms): a return address there was put by a return probe of another tool, whose
/// handler ran before ours (the kernel runs the newest first), and names no caller.
#[map]
static TRAMPOLINE: Array<[u64; 2]> = Array::with_max_entries(1, 0);

/// Whether `lr` is inside the kretprobe trampoline (see `TRAMPOLINE`).
#[inline(always)]
fn at_trampoline(lr: u64) -> bool {
    TRAMPOLINE.get(0).is_some_and(|r| lr >= r[0] && lr < r[1])
}

/// Puts `lr`, the return address into the probed function's caller, second in the copied
/// stack: at a function's entry arm64 keeps it in x30, and the kernel's walk from the
/// entry's registers (pc, then the frame records) never sees it, so the caller was missing
/// (seen in the lab: `rxe_mmap` straight under `__mmap_region`, without `ib_uverbs_mmap`).
/// A caller that came by a tail call left the grandparent's address in x30, which the walk
/// already has: then nothing is added. A full stack loses its outermost frame.
///
/// # Safety
/// `ev` is this CPU's scratch record, its stack filled by this run.
#[inline(always)]
unsafe fn with_caller(ev: *mut ProbeEvent, lr: u64) {
    if at_trampoline(lr) {
        return;
    }
    // SAFETY: the caller's contract; indexes are bounded by MAX_STACK.
    unsafe {
        let n = read_volatile(&(*ev).stack_len) as usize / 8;
        if n == 0 || (n > 1 && read_volatile(&(*ev).stack[1]) == lr) {
            return;
        }
        let last = if n < MAX_STACK { n } else { MAX_STACK - 1 };
        for k in 0..MAX_STACK - 2 {
            let i = MAX_STACK - 1 - k;
            if i <= last && i >= 2 {
                let v = read_volatile(&(*ev).stack[(i - 1) & (MAX_STACK - 1)]);
                core::ptr::write_volatile(&raw mut (*ev).stack[i & (MAX_STACK - 1)], v);
            }
        }
        core::ptr::write_volatile(&raw mut (*ev).stack[1], lr);
        (*ev).stack_len = ((last + 1) * 8) as u32;
    }
}

/// A run that only counts (`daemon --metrics-only`, `SlotPlan::agg`): kernel-context
/// probes aggregate here what the daemon's metrics say, and nothing goes to the ring.
/// Kernel-context programs run with preemption off and never nest on a CPU, so the
/// per-CPU counts take plain adds; the shared `PINS` take atomic ones.
mod counted {
    use super::*;

    /// Hits per process and site, per CPU.
    #[map]
    static PROC_HITS: PerCpuHashMap<ProcSite, u64> = PerCpuHashMap::with_max_entries(16384, 0);

    /// The name of each process counted, as its first counted hit saw it.
    #[map]
    static COMMS: HashMap<u32, [u8; 16]> = HashMap::with_max_entries(8192, 0);

    /// Pins under way, by pid_tgid.
    #[map]
    static PIN_STARTS: HashMap<u64, PinStart> = HashMap::with_max_entries(4096, 0);

    /// Live umems: what each charges, to whom.
    #[map]
    static UMEMS: HashMap<u64, Charge> = HashMap::with_max_entries(65536, 0);

    /// Each process's pins.
    #[map]
    static PINS: HashMap<u32, ProcPins> = HashMap::with_max_entries(8192, 0);

    /// A zeroed `ProcPins` to create `PINS` entries from (never written).
    #[map]
    static PINS_ZERO: PerCpuArray<ProcPins> = PerCpuArray::with_max_entries(1, 0);

    /// Each CQ's maker (tgid), by the CQ; a CQ destroyed is not seen, so the oldest go.
    #[map]
    static CQ_OWNERS: LruHashMap<u64, u32> = LruHashMap::with_max_entries(65536, 0);

    /// Each CQ owner's completions and wakeups.
    #[map]
    static CQS: HashMap<u32, ProcCqs> = HashMap::with_max_entries(8192, 0);

    /// A zeroed `ProcCqs` to create `CQS` entries from (never written).
    #[map]
    static CQS_ZERO: PerCpuArray<ProcCqs> = PerCpuArray::with_max_entries(1, 0);

    /// `[start, end)` of the functions whose frame marks softirq processing (userspace
    /// writes them from kallsyms; an empty range ends the list).
    #[map]
    static SOFTIRQ_RANGES: Array<[u64; 2]> = Array::with_max_entries(SOFTIRQ_FUNCS as u32, 0);

    /// A counted hit: the record `ev` was filled from the slot's plan.
    ///
    /// # Safety
    /// `ev` is this CPU's scratch record, filled by this run.
    #[inline(always)]
    pub(super) unsafe fn hit(site: usize, plan: &SlotPlan, ev: *const ProbeEvent) {
        // SAFETY: the caller's contract; the indexes are masked into `vals`.
        let (tgid, ts_ns, comm, a, b) = unsafe {
            let val = |i: u8| read_volatile(&(*ev).vals[i as usize & (MAX_FETCH - 1)]);
            ((*ev).hdr.tgid, (*ev).hdr.ts_ns, (*ev).hdr.comm, val(plan.agg_a), val(plan.agg_b))
        };
        let key = ProcSite { tgid, site: site as u32 };
        match PROC_HITS.get_ptr_mut(key) {
            // SAFETY: this CPU's value of the entry; nothing else runs on this CPU meanwhile.
            Some(n) => unsafe { *n += 1 },
            None => {
                if PROC_HITS.insert(key, 1, 0).is_err() {
                    count(site, CNT_COUNT_FULL);
                }
                COMMS.insert(tgid, comm, 0).ok();
            }
        }
        let done = match plan.agg {
            AGG_PIN_ENTRY => {
                let start = PinStart { ts_ns, addr: a, len: b };
                match PIN_STARTS.insert(bpf_get_current_pid_tgid(), start, 0) {
                    Ok(()) => Counted::Yes,
                    Err(_) => Counted::TableFull,
                }
            }
            AGG_PIN_RETURN => returned(tgid, ts_ns, a),
            AGG_UNPIN => released(a),
            AGG_CQ_MADE => {
                CQ_OWNERS.insert(a, tgid, 0).ok();
                Counted::Yes
            }
            // SAFETY: the caller's contract.
            AGG_COMPLETION => completed(a, ts_ns, unsafe { context(ev, &comm) }),
            AGG_WAKEUP if (a as i64) > 0 => woke(tgid, ts_ns),
            _ => Counted::Yes,
        };
        match done {
            Counted::Yes => {}
            Counted::TableFull => count(site, CNT_COUNT_FULL),
            Counted::NotJoined => count(site, CNT_NOT_JOINED),
        }
    }

    /// Whether a hit's charge was counted, and if not, why (the site's loss counter).
    enum Counted {
        Yes,
        TableFull,
        NotJoined,
    }

    /// Where the run that filled `ev` ran (`CTX_*`): softirq processing if a frame of its
    /// stack is in `SOFTIRQ_RANGES`, else a kworker by its name, else a process.
    ///
    /// # Safety
    /// `ev` is this CPU's scratch record, filled by this run.
    #[inline(always)]
    unsafe fn context(ev: *const ProbeEvent, comm: &[u8; 16]) -> usize {
        // SAFETY: the caller's contract; frame reads are bounded by `stack`'s length.
        let frames = unsafe { read_volatile(&(*ev).stack_len) } as usize / 8;
        for i in 0..MAX_STACK {
            if i >= frames {
                break;
            }
            // SAFETY: as above.
            let f = unsafe { read_volatile(&(*ev).stack[i]) };
            for r in 0..SOFTIRQ_FUNCS {
                let Some(range) = SOFTIRQ_RANGES.get(r as u32) else { break };
                if range[1] == 0 {
                    break;
                }
                if f >= range[0] && f < range[1] {
                    return CTX_SOFTIRQ;
                }
            }
        }
        if comm[..7] == *b"kworker" { CTX_KWORKER } else { CTX_PROCESS }
    }

    /// A completion event on `cq` at `now`, its handler in context `ctx`: counted for the
    /// CQ's owner and queued for its wakeup. A CQ made before the run has no known owner.
    #[inline(always)]
    fn completed(cq: u64, now: u64, ctx: usize) -> Counted {
        // SAFETY: a copy of the value is taken.
        let Some(owner) = (unsafe { CQ_OWNERS.get(cq) }).copied() else { return Counted::NotJoined };
        let Some(p) = entry_or_zero(&CQS, &CQS_ZERO, owner) else { return Counted::TableFull };
        // SAFETY: `p` is a live entry of `CQS`; counters change by atomic adds. The slot
        // is taken by a plain read of `pushed` (the BPF target this builds for has no
        // fetching atomics): two completions of one process at once on two CPUs may take
        // the same slot, and one of their wakeups then reads the other's time.
        unsafe {
            if ctx < 3 {
                atomic_add((*p).by_context.as_mut_ptr().add(ctx), 1);
            }
            let n = read_volatile(&(*p).pushed) as usize;
            core::ptr::write_volatile((*p).pending.as_mut_ptr().add(n % PENDING), now);
            atomic_add(&raw mut (*p).pushed, 1);
        }
        Counted::Yes
    }

    /// This process's channel read returned an event at `now`: the oldest completion
    /// waiting for it woke it. None waiting: its completion was not counted.
    #[inline(always)]
    fn woke(tgid: u32, now: u64) -> Counted {
        let Some(p) = CQS.get_ptr_mut(tgid) else { return Counted::NotJoined };
        // SAFETY: a live entry of `CQS`; as in `completed`.
        unsafe {
            if read_volatile(&(*p).popped) >= read_volatile(&(*p).pushed) {
                return Counted::NotJoined;
            }
            // As in `completed`: two reads of one process at once may take one slot.
            let n = read_volatile(&(*p).popped) as usize;
            atomic_add(&raw mut (*p).popped, 1);
            let at = read_volatile((*p).pending.as_ptr().add(n % PENDING));
            observe(&raw mut (*p).wakeup, &raw mut (*p).wakeup_sum_ns, now.wrapping_sub(at));
        }
        Counted::Yes
    }

    /// Counts one latency of `ns` in a histogram of `LATENCY_BUCKETS_NS` (the last
    /// bucket for larger values) and its sum, by atomic adds.
    ///
    /// # Safety
    /// `counts` and `sum` are valid, aligned fields of a live map entry.
    #[inline(always)]
    unsafe fn observe(counts: *mut [u64; LATENCY_BUCKETS_NS.len() + 1], sum: *mut u64, ns: u64) {
        let mut b = LATENCY_BUCKETS_NS.len();
        for (i, upper) in LATENCY_BUCKETS_NS.iter().enumerate() {
            if ns <= *upper {
                b = i;
                break;
            }
        }
        // SAFETY: the caller's contract; `b` is at most the last bucket's index.
        unsafe {
            if b <= LATENCY_BUCKETS_NS.len() {
                atomic_add(counts.cast::<u64>().add(b), 1);
            }
            atomic_add(sum, ns);
        }
    }

    /// The thread's pin returned `umem` at `now`.
    #[inline(always)]
    fn returned(tgid: u32, now: u64, umem: u64) -> Counted {
        let key = bpf_get_current_pid_tgid();
        // SAFETY: a copy of the entry is taken before it is removed.
        let start = unsafe { PIN_STARTS.get(key) }.copied();
        PIN_STARTS.remove(key).ok();
        let Some(p) = entry_or_zero(&PINS, &PINS_ZERO, tgid) else { return Counted::TableFull };
        // SAFETY: `p` is a live entry of `PINS`; every field is changed by atomic adds.
        unsafe {
            if !derefable(umem) {
                atomic_add(&raw mut (*p).refused, 1);
                return Counted::Yes;
            }
            let Some(start) = start else { return Counted::NotJoined };
            let first = start.addr / PIN_PAGE;
            let end = (start.addr.wrapping_add(start.len).wrapping_add(PIN_PAGE - 1)) / PIN_PAGE;
            let bytes = end.wrapping_sub(first).wrapping_mul(PIN_PAGE);
            atomic_add(&raw mut (*p).pins, 1);
            observe(&raw mut (*p).latency, &raw mut (*p).latency_sum_ns, now.wrapping_sub(start.ts_ns));
            atomic_add(&raw mut (*p).pinned, bytes);
            // The peak: a plain compare-and-store (two pins at once may keep the smaller).
            let now_pinned = read_volatile(&(*p).pinned);
            if read_volatile(&(*p).peak) < now_pinned {
                core::ptr::write_volatile(&raw mut (*p).peak, now_pinned);
            }
            // Without its entry the release cannot uncharge it: pinned stays high.
            match UMEMS.insert(umem, Charge { tgid, _pad: 0, bytes }, 0) {
                Ok(()) => Counted::Yes,
                Err(_) => Counted::TableFull,
            }
        }
    }

    /// The umem `umem` is released: its charge leaves its process. Not known: it was
    /// pinned before the run (or its charge found no room).
    #[inline(always)]
    fn released(umem: u64) -> Counted {
        // SAFETY: a copy of the entry is taken before it is removed.
        let Some(c) = (unsafe { UMEMS.get(umem) }).copied() else { return Counted::NotJoined };
        UMEMS.remove(umem).ok();
        if let Some(p) = PINS.get_ptr_mut(c.tgid) {
            // SAFETY: a live entry of `PINS`; a subtraction as an atomic add of its negation.
            unsafe { atomic_add(&raw mut (*p).pinned, c.bytes.wrapping_neg()) };
        }
        Counted::Yes
    }
}

/// Uprobe records being built, one per thread inside a uprobe program (keyed by
/// pid_tgid): uprobe programs run preemptible, so two runs on one CPU may interleave and a
/// per-CPU scratch would be shared. Building in map memory (not on the BPF stack, whose
/// bytes the verifier tracks value by value) also keeps verification short.
#[map]
static USCRATCH: HashMap<u64, ProbeHead> = HashMap::with_max_entries(4096, 0);

/// A zeroed record to create `USCRATCH` entries from (never written).
#[map]
static UZERO: PerCpuArray<ProbeHead> = PerCpuArray::with_max_entries(1, 0);

/// Nonzero once `sched_exit` is attached (userspace sets it): a thread's scratch entries
/// then stay from one hit to the next (one lookup a hit) and leave when the thread exits.
/// Without it each hit creates its entry and removes it (three map operations).
#[map]
static EXIT_PRUNES: Array<u32> = Array::with_max_entries(1, 0);

#[inline(always)]
fn pruned_at_exit() -> bool {
    EXIT_PRUNES.get(0).is_some_and(|v| *v != 0)
}

/// This thread's scratch entry in `scratch` (keyed by pid_tgid: a preemptible program's
/// run is the only one using its key), created from `zero` if it has none; with the key, to
/// remove the entry after the record is written (`done_with`). `None`: the map is full.
/// Whoever fills the entry writes every byte it sends: a kept entry holds the last record.
#[inline(always)]
fn thread_scratch<T>(scratch: &HashMap<u64, T>, zero: &PerCpuArray<T>) -> Option<(*mut T, u64)> {
    let key = bpf_get_current_pid_tgid();
    entry_or_zero(scratch, zero, key).map(|p| (p, key))
}

/// `map`'s entry for `key`, created from `zero`'s one entry if it has none; `None` when
/// the map is full. BPF_NOEXIST (1): an entry another CPU made meanwhile is kept, and used.
#[inline(always)]
fn entry_or_zero<K: Copy, V>(map: &HashMap<K, V>, zero: &PerCpuArray<V>, key: K) -> Option<*mut V> {
    if let Some(p) = map.get_ptr_mut(key) {
        return Some(p);
    }
    map.insert(key, zero.get(0)?, 1).ok();
    map.get_ptr_mut(key)
}

/// The record in this thread's entry is written: the entry leaves now, unless `sched_exit`
/// removes it when the thread exits. The entry is this run's alone; a failed delete only
/// leaves a record behind, overwritten by the thread's next hit.
#[inline(always)]
fn done_with<T>(scratch: &HashMap<u64, T>, key: u64) {
    if !pruned_at_exit() {
        scratch.remove(key).ok();
    }
}

/// A uprobe hit: built in this thread's own scratch entry, without a kernel stack.
#[inline(always)]
fn user_probe_hit(site: usize, slot: usize, kind: u8, plan: &SlotPlan, src: impl Fn(u8) -> Result<u64, i32>) {
    let Some((h, key)) = thread_scratch(&USCRATCH, &UZERO) else {
        count(site, CNT_NO_SCRATCH);
        return;
    };
    // SAFETY: `h` is this thread's own scratch entry (no other run uses its key).
    unsafe {
        (*h).hdr = header(kind, slot as u8);
        if fill::<true>(h, plan, src) {
            count(site, CNT_READ_FAILED);
        }
        count_build(site, bpf_ktime_get_ns().wrapping_sub((*h).hdr.ts_ns));
    }
    emit(site, h, PROBE_FIXED_LEN);
    done_with(&USCRATCH, key);
}

/// A probe hit: kernel programs and uprobe programs are separate programs, so `USER` is
/// known when each is compiled (one path each keeps the verifier's work small).
#[inline(always)]
fn probe_hit<const USER: bool>(
    slot: usize,
    kind: u8,
    ctx: &impl StackIdContext,
    src: impl Fn(u8) -> Result<u64, i32>,
) {
    let site = if kind == KIND_PROBE_RETURN { return_site(slot) } else { slot };
    let Some(plan) = PLANS.get(site as u32) else {
        return;
    };
    if plan.active == 0 {
        return;
    }
    count(site, CNT_HITS);
    if kind == KIND_PROBE_ENTRY && plan.watch != 0 {
        watch_this_process();
    }
    if USER {
        user_probe_hit(site, slot, kind, plan, src);
    } else {
        kernel_probe_hit(site, slot, kind, plan, ctx, src);
    }
}

/// A verbs entry of a process not yet watched: its syscalls are watched from here on.
/// The tracer's own insert would come at its next tick, after a short-lived process may
/// have done all its work (or exited, leaving an entry that `sched_exit` never removes).
#[inline(always)]
fn watch_this_process() {
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    // SAFETY: map lookup from program context; most hits find their process watched.
    if unsafe { TARGETS.get(tgid) }.is_some() {
        return;
    }
    count(SITE_WATCH, CNT_HITS);
    if TARGETS.insert(tgid, 1, 0).is_err() {
        count(SITE_WATCH, CNT_NO_SCRATCH);
    }
}

fn on_entry<const USER: bool>(ctx: &ProbeContext, slot: usize) {
    probe_hit::<USER>(slot, KIND_PROBE_ENTRY, ctx, |src| match src {
        s if (SRC_ARG0..SRC_ARG0 + 8).contains(&s) => entry_arg(ctx, s - SRC_ARG0),
        // Kernel programs only: a uprobe program reads user memory.
        // SAFETY: bpf_get_current_task only returns the running task's address.
        SRC_TASK if !USER => Ok(unsafe { bpf_get_current_task() }),
        SRC_CALLER if !USER => caller(ctx),
        _ => Err(-1),
    });
}

/// At a kernel function's entry, the return address into its caller, where the
/// architecture keeps it in a register (see `with_caller`); x86-64 keeps it on the stack,
/// which the kernel's walk reads.
#[cfg(bpf_target_arch = "aarch64")]
#[inline(always)]
fn caller(ctx: &ProbeContext) -> Result<u64, i32> {
    let regs = ctx.regs;
    // SAFETY: `regs` is the probe's pt_regs; x30 is the link register.
    unsafe { bpf_probe_read_kernel(&(*regs).regs[30]) }
}

#[cfg(not(bpf_target_arch = "aarch64"))]
#[inline(always)]
fn caller(_ctx: &ProbeContext) -> Result<u64, i32> {
    Err(-1)
}

fn on_return<const USER: bool>(ctx: &RetProbeContext, slot: usize) {
    probe_hit::<USER>(slot, KIND_PROBE_RETURN, ctx, |src| match src {
        SRC_RET => Ok(ctx.ret::<u64>()),
        _ => Err(-1),
    });
}

/// Kernel function address (and address + 4, past an ENDBR) → kprobe slot.
#[map]
static FUNC_SLOTS: HashMap<u64, u32> = HashMap::with_max_entries(64, 0);

#[inline(always)]
fn kernel_slot(ctx: &impl EbpfContext) -> Option<usize> {
    // SAFETY: bpf_get_func_ip reads the probed function's address from the kprobe context;
    // the map lookup returns a reference valid for this run.
    unsafe {
        let ip = bpf_get_func_ip(ctx.as_ptr());
        FUNC_SLOTS.get(ip).map(|s| *s as usize).filter(|s| *s < MAX_SLOTS)
    }
}

#[kprobe]
pub fn kprobe_entry(ctx: ProbeContext) -> u32 {
    if let Some(slot) = kernel_slot(&ctx) {
        on_entry::<false>(&ctx, slot);
    }
    0
}

#[kretprobe]
pub fn kprobe_return(ctx: RetProbeContext) -> u32 {
    if let Some(slot) = kernel_slot(&ctx) {
        on_return::<false>(&ctx, slot);
    }
    0
}

const _: () = assert!(MAX_SLOTS == 24);

/// All user-space probes share these two programs; the attach cookie is the slot id.
#[uprobe]
pub fn uprobe_entry(ctx: ProbeContext) -> u32 {
    own_stack(&ctx);
    // SAFETY: the helper reads the cookie of the link that ran this program.
    let slot = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as usize;
    if (MAX_SLOTS..TOTAL_SLOTS).contains(&slot) {
        on_entry::<true>(&ctx, slot);
    }
    0
}

#[uretprobe]
pub fn uprobe_return(ctx: RetProbeContext) -> u32 {
    own_stack(&ctx);
    // SAFETY: as above.
    let slot = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as usize;
    if (MAX_SLOTS..TOTAL_SLOTS).contains(&slot) {
        on_return::<true>(&ctx, slot);
    }
    0
}

/// Step records being built, one per thread inside the marker (keyed by pid_tgid): the
/// marker runs preemptible, so a per-CPU scratch could be shared by two runs; a record
/// (1 KiB of JSON) is too large for the BPF stack.
#[map]
static STEP_SCRATCH: HashMap<u64, StepEvent> = HashMap::with_max_entries(1024, 0);

/// A zeroed record to create `STEP_SCRATCH` entries from (never written).
#[map]
static STEP_ZERO: PerCpuArray<StepEvent> = PerCpuArray::with_max_entries(1, 0);

/// The companion's `rdma_trace_step(rec, len)`: the step's JSON record, read from its
/// memory, built in this thread's scratch entry and written with one ring output.
/// Nonzero once the run is stopping (`Loaded::switch_off`): the step marker has no plan
/// slot to switch off, so it reads this.
#[map]
static STEPS_OFF: Array<u32> = Array::with_max_entries(1, 0);

#[uprobe]
pub fn step_marker(ctx: ProbeContext) -> u32 {
    own_stack(&ctx);
    if STEPS_OFF.get(0).is_some_and(|v| *v != 0) {
        return 0;
    }
    count(SITE_STEP, CNT_HITS);
    let Some((rec, key)) = thread_scratch(&STEP_SCRATCH, &STEP_ZERO) else {
        count(SITE_STEP, CNT_NO_SCRATCH);
        return 0;
    };
    let src: u64 = ctx.arg(0).unwrap_or(0);
    let asked: u64 = ctx.arg(1).unwrap_or(0);
    // SAFETY: `rec` is this thread's own scratch entry (no other run uses its key) of
    // `size_of::<StepEvent>()` bytes; the user read is bounded by `json`'s length.
    let len = unsafe {
        (*rec).hdr = header(KIND_STEP, 0);
        (*rec).asked = asked as u32;
        // The bound is taken here, after header()'s helper calls, of a value read anew:
        // compared earlier, LLVM kept a copy on the stack from before the compare, and
        // 6.1's verifier gives a spilled copy no bounds from a compare of its register.
        let asked_now = read_volatile(&asked);
        let n = if asked_now > STEP_JSON_MAX as u64 { STEP_JSON_MAX as u32 } else { asked_now as u32 };
        let dst = (*rec).json.as_mut_ptr().cast();
        let r = aya_ebpf::helpers::generated::bpf_probe_read_user(dst, n, src as *const _);
        let len = if r == 0 { n } else { 0 };
        if r != 0 {
            count(SITE_STEP, CNT_READ_FAILED);
        }
        (*rec).len = len;
        count_build(SITE_STEP, bpf_ktime_get_ns().wrapping_sub((*rec).hdr.ts_ns));
        len as usize
    };
    emit(SITE_STEP, rec, STEP_FIXED_LEN + len);
    done_with(&STEP_SCRATCH, key);
    0
}

fn on_tracepoint(ctx: &TracePointContext, slot: usize) {
    let base = ctx.as_ptr() as u64;
    probe_hit::<false>(slot, KIND_PROBE_ENTRY, ctx, |src| match src {
        SRC_CTX => Ok(base),
        _ => Err(-1),
    });
}

/// Tracepoint probes use the last two slots.
#[tracepoint]
pub fn tp_22(ctx: TracePointContext) -> u32 {
    on_tracepoint(&ctx, 22);
    0
}

#[tracepoint]
pub fn tp_23(ctx: TracePointContext) -> u32 {
    on_tracepoint(&ctx, 23);
    0
}

#[inline(always)]
fn watched() -> bool {
    let pid_tgid = bpf_get_current_pid_tgid();
    let (tgid, tid) = ((pid_tgid >> 32) as u32, pid_tgid as u32);
    // SAFETY: map lookups return references valid for this program run.
    unsafe { TARGETS.get(tgid).is_some() || TARGETS.get(tid).is_some() }
}

fn on_syscall(ctx: &TracePointContext, kind: u8, site: usize) {
    if !watched() {
        return;
    }
    let Some(layout) = SYSCALL_LAYOUT.get(0) else {
        return;
    };
    let id_off = if kind == KIND_SYS_ENTER { layout.enter_id } else { layout.exit_id };
    // SAFETY: offsets come from the tracepoint's format file; reads are checked.
    let Ok(nr) = (unsafe { ctx.read_at::<i64>(id_off as usize) }) else {
        count(site, CNT_READ_FAILED);
        return;
    };
    // SAFETY: as above.
    if nr < 0 || unsafe { SYSCALLS.get(nr as u32) }.is_none() {
        return;
    }
    count(site, CNT_HITS);
    let Some(ev) = SSCRATCH.get_ptr_mut(0) else {
        count(site, CNT_NO_SCRATCH);
        return;
    };
    // SAFETY: this CPU's scratch record (tracepoint programs run with preemption off and
    // never nest); all fields written before it is emitted.
    unsafe {
        (*ev).hdr = header(kind, 0);
        (*ev).nr = nr as u64;
        (*ev).args = [0; 6];
        (*ev).path = [0; PATH_LEN];
        if kind == KIND_SYS_ENTER {
            match ctx.read_at::<[u64; 6]>(layout.enter_args as usize) {
                Ok(a) => (*ev).args = a,
                Err(_) => {
                    (*ev).hdr.fail_mask = 1;
                    count(site, CNT_READ_FAILED);
                }
            }
            let path_arg = if nr as u32 == layout.nr_openat {
                Some((*ev).args[1])
            } else if nr as u32 == layout.nr_open {
                Some((*ev).args[0])
            } else {
                None
            };
            if let Some(p) = path_arg
                && bpf_probe_read_user_str_bytes(p as *const u8, &mut (*ev).path).is_err()
            {
                (*ev).hdr.fail_mask |= 2;
                count(site, CNT_READ_FAILED);
            }
        } else {
            match ctx.read_at::<u64>(layout.exit_ret as usize) {
                Ok(r) => (*ev).args[0] = r,
                Err(_) => {
                    (*ev).hdr.fail_mask = 1;
                    count(site, CNT_READ_FAILED);
                }
            }
        }
        count_build(site, bpf_ktime_get_ns().wrapping_sub((*ev).hdr.ts_ns));
    }
    emit(site, ev, size_of::<SyscallEvent>());
}

#[tracepoint]
pub fn sys_enter(ctx: TracePointContext) -> u32 {
    on_syscall(&ctx, KIND_SYS_ENTER, SITE_SYS_ENTER);
    0
}

/// A watched process forked: watch the child too (`trace -- sh -c '…'`).
#[tracepoint]
pub fn sched_fork(ctx: TracePointContext) -> u32 {
    let Some(layout) = SYSCALL_LAYOUT.get(0) else {
        return 0;
    };
    // SAFETY: offsets come from the tracepoint's format file; reads are checked.
    let (Ok(parent), Ok(child)) = (unsafe { ctx.read_at::<u32>(layout.fork_parent as usize) }, unsafe {
        ctx.read_at::<u32>(layout.fork_child as usize)
    }) else {
        return 0;
    };
    // SAFETY: map lookup/insert from program context.
    if unsafe { TARGETS.get(parent) }.is_some() {
        count(SITE_FORK, CNT_HITS);
        if TARGETS.insert(child, 1, 0).is_err() {
            count(SITE_FORK, CNT_NO_SCRATCH);
        }
    }
    0
}

/// A task exited: it is no longer watched (its id may be reused by an unrelated task,
/// and the table must not fill up with the dead), and its uprobe scratch entries leave
/// (no user code of it runs after this point, so no uprobe program of it can be using them).
#[tracepoint]
pub fn sched_exit(_ctx: TracePointContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    // SAFETY: map lookups from program context; lookups first, as most exiting tasks
    // are in none of these maps and a lookup takes no lock.
    // A failed delete means another exit path removed it first: nothing to count.
    if unsafe { TARGETS.get(tid) }.is_some() {
        TARGETS.remove(tid).ok();
    }
    if USCRATCH.get_ptr(pid_tgid).is_some() {
        USCRATCH.remove(pid_tgid).ok();
    }
    if STEP_SCRATCH.get_ptr(pid_tgid).is_some() {
        STEP_SCRATCH.remove(pid_tgid).ok();
    }
    0
}

#[tracepoint]
pub fn sys_exit(ctx: TracePointContext) -> u32 {
    on_syscall(&ctx, KIND_SYS_EXIT, SITE_SYS_EXIT);
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

/// Dual-licensed: the project's MIT, plus GPL so the kernel offers the GPL-only helpers
/// (`bpf_probe_read_*`, `bpf_get_stack`); the kernel accepts "Dual MIT/GPL" as GPL-compatible.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
