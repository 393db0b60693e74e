//! rdma-trace's eBPF programs.
//!
//! * `kprobe_entry` / `kprobe_return`: one kprobe and one kretprobe program, attached to
//!   every probed kernel function; the function's address picks its slot (`FUNC_SLOTS`),
//!   whose fetch plan (which arguments, which fields behind them, at offsets resolved from
//!   BTF at load time) userspace wrote into `PLANS`.
//! * `sys_enter` / `sys_exit`: the `raw_syscalls` tracepoints, filtered to the watched
//!   processes (`TARGETS`, by tgid or tid) and syscalls (`SYSCALLS`).
//! * `tp_14` / `tp_15`: kernel tracepoints (e.g. `rdma_core:mr_dereg`), fields read from
//!   the record at offsets taken from its tracefs `format`.
//!
//! Every hit and every loss is counted per slot in `COUNTERS` (per CPU): ring-buffer
//! reservation failures, failed field reads, failed stack captures.
#![no_std]
#![no_main]

use aya_ebpf::{
    EbpfContext,
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_ktime_get_ns,
        bpf_probe_read_kernel, bpf_probe_read_user, bpf_probe_read_user_str_bytes,
        generated::{bpf_get_attach_cookie, bpf_get_func_ip, bpf_get_stack},
    },
    macros::{kprobe, kretprobe, map, tracepoint, uprobe, uretprobe},
    maps::{Array, HashMap, PerCpuArray, RingBuf},
    programs::{ProbeContext, RetProbeContext, TracePointContext},
};
use rdma_trace_common::*;

/// Default 4 MiB; userspace may resize it at load time.
#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(4 * 1024 * 1024, 0);

#[map]
static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(COUNTER_ENTRIES as u32, 0);

#[map]
static PLANS: Array<SlotPlan> = Array::with_max_entries(SITES as u32, 0);

/// Watched processes: a tgid or a tid.
#[map]
static TARGETS: HashMap<u32, u8> = HashMap::with_max_entries(1024, 0);

/// Watched syscall numbers.
#[map]
static SYSCALLS: HashMap<u32, u8> = HashMap::with_max_entries(64, 0);

/// Offsets inside the raw_syscalls tracepoint records (from tracefs `format`).
#[map]
static SYSCALL_LAYOUT: Array<SyscallLayout> = Array::with_max_entries(1, 0);

#[inline(always)]
fn count(site: usize, what: usize) {
    let idx = (site * COUNTERS + what) as u32;
    if let Some(p) = STATS.get_ptr_mut(idx) {
        // SAFETY: per-CPU slot owned by this CPU while the program runs.
        unsafe { *p += 1 };
    }
}

#[inline(always)]
fn header(kind: u8, slot: u8) -> EventHeader {
    let pid_tgid = bpf_get_current_pid_tgid();
    EventHeader {
        ts_ns: unsafe { bpf_ktime_get_ns() },
        tgid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
        comm: bpf_get_current_comm().unwrap_or([0; 16]),
        cpu: unsafe { bpf_get_smp_processor_id() },
        kind,
        slot,
        fail_mask: 0,
        skip_mask: 0,
    }
}

/// Argument `n` (0-based) at function entry: registers for 0..6, the stack beyond
/// (at entry `sp` points at the return address; argument 7 is the next word).
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

/// ERR_PTR values and NULL are never dereferenced.
#[inline(always)]
fn derefable(p: u64) -> bool {
    (4096..(-4095i64) as u64).contains(&p)
}

#[inline(always)]
fn read_sized(addr: u64, size: u8, user: bool) -> Result<u64, i32> {
    // SAFETY: reads go through the probe-read helpers, which fault safely.
    unsafe {
        if user {
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
fn follow(base: u64, f: &Fetch, user: bool) -> Fetched {
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
        match read_sized(at, size, user) {
            Ok(v) => addr = v,
            Err(_) => return Fetched::Failed,
        }
    }
    Fetched::Value(addr)
}

#[inline(always)]
fn probe_hit(slot: usize, kind: u8, ctx: &impl EbpfContext, src: impl Fn(u8) -> Result<u64, i32>) {
    let site = if kind == KIND_PROBE_RETURN { return_site(slot) } else { slot };
    let Some(plan) = PLANS.get(site as u32) else {
        return;
    };
    if plan.active == 0 {
        return;
    }
    count(site, CNT_HITS);
    let Some(mut entry) = EVENTS.reserve::<ProbeEvent>(0) else {
        count(site, CNT_RINGBUF_FULL);
        return;
    };
    let ev = entry.as_mut_ptr();
    // SAFETY: `ev` points at a reserved, exclusively owned ring-buffer record of the
    // right size; every field is written before submit.
    unsafe {
        (*ev).hdr = header(kind, slot as u8);
        (*ev).vals = [0; MAX_FETCH];
        (*ev)._pad = 0;
        (*ev).stack_len = 0;
        let n = plan.n as usize;
        let mut failed = false;
        for i in 0..MAX_FETCH {
            if i >= n {
                break;
            }
            let f = &plan.fetches[i];
            let base = match src(f.src) {
                Ok(v) => v,
                Err(_) => {
                    (*ev).hdr.fail_mask |= 1 << i;
                    failed = true;
                    continue;
                }
            };
            match follow(base, f, plan.user != 0) {
                Fetched::Value(v) => (*ev).vals[i] = v,
                Fetched::Skipped(v) => {
                    (*ev).vals[i] = v;
                    (*ev).hdr.skip_mask |= 1 << i;
                }
                Fetched::Failed => {
                    (*ev).hdr.fail_mask |= 1 << i;
                    failed = true;
                }
            }
        }
        if failed {
            count(site, CNT_READ_FAILED);
        }
        if plan.stack != 0 {
            let r = bpf_get_stack(ctx.as_ptr(), (*ev).stack.as_mut_ptr().cast(), (MAX_STACK * 8) as u32, 0);
            if r > 0 {
                (*ev).stack_len = r as u32;
            } else {
                count(site, CNT_STACK_FAILED);
            }
        }
    }
    entry.submit(0);
}

fn on_entry(ctx: &ProbeContext, slot: usize) {
    probe_hit(slot, KIND_PROBE_ENTRY, ctx, |src| match src {
        s if (SRC_ARG0..SRC_ARG0 + 8).contains(&s) => entry_arg(ctx, s - SRC_ARG0),
        _ => Err(-1),
    });
}

fn on_return(ctx: &RetProbeContext, slot: usize) {
    probe_hit(slot, KIND_PROBE_RETURN, ctx, |src| match src {
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
        on_entry(&ctx, slot);
    }
    0
}

#[kretprobe]
pub fn kprobe_return(ctx: RetProbeContext) -> u32 {
    if let Some(slot) = kernel_slot(&ctx) {
        on_return(&ctx, slot);
    }
    0
}

const _: () = assert!(MAX_SLOTS == 16);

/// All user-space probes share these two programs; the attach cookie is the slot id.
#[uprobe]
pub fn uprobe_entry(ctx: ProbeContext) -> u32 {
    // SAFETY: the helper reads the cookie of the link that ran this program.
    let slot = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as usize;
    if (MAX_SLOTS..TOTAL_SLOTS).contains(&slot) {
        on_entry(&ctx, slot);
    }
    0
}

#[uretprobe]
pub fn uprobe_return(ctx: RetProbeContext) -> u32 {
    // SAFETY: as above.
    let slot = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as usize;
    if (MAX_SLOTS..TOTAL_SLOTS).contains(&slot) {
        on_return(&ctx, slot);
    }
    0
}

fn on_tracepoint(ctx: &TracePointContext, slot: usize) {
    let base = ctx.as_ptr() as u64;
    probe_hit(slot, KIND_PROBE_ENTRY, ctx, |src| match src {
        SRC_CTX => Ok(base),
        _ => Err(-1),
    });
}

/// Tracepoint probes use the last two slots.
#[tracepoint]
pub fn tp_14(ctx: TracePointContext) -> u32 {
    on_tracepoint(&ctx, 14);
    0
}

#[tracepoint]
pub fn tp_15(ctx: TracePointContext) -> u32 {
    on_tracepoint(&ctx, 15);
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
    let Some(mut entry) = EVENTS.reserve::<SyscallEvent>(0) else {
        count(site, CNT_RINGBUF_FULL);
        return;
    };
    let ev = entry.as_mut_ptr();
    // SAFETY: exclusively owned reserved record; all fields written before submit.
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
    }
    entry.submit(0);
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
        let _ = TARGETS.insert(child, 1, 0);
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

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
