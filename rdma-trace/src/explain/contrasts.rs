//! The contrasts that make it click: the data phase with and without the kernel (bypass,
//! event mode against busy polling), and fork() with pinned memory.

use super::parts::Missing;
use super::parts::{Explanation, Input, RunCounts, Stage};
use crate::event::EventKind;
use crate::explain::lessons as L;
use crate::steps::{Mode, StepName};

pub(super) fn bypass(input: &Input) -> Result<Explanation, Missing> {
    // The process with the most completions (the companion's, when its steps are known).
    let companion = input.steps.first().map(|s| s.process());
    let ps = input
        .story
        .processes
        .values()
        .filter(|p| !p.data_phase_syscalls.is_empty())
        .max_by_key(|p| (Some(p.pid) == companion, p.completions_total, p.calls_total))
        .ok_or(Missing::DataPhase)?;
    let count = |names: &[StepName]| {
        input.steps.iter().filter(|s| s.process() == ps.pid && names.contains(&s.name)).count() as u64
    };
    let (sends, recvs) = (count(&[StepName::PostSend, StepName::PostWrite]), count(&[StepName::PostRecv]));
    let (wr, counted_as) = if sends + recvs > 0 {
        (sends + recvs, format!("work requests it posted (its own steps: {sends} sends, {recvs} receives)"))
    } else {
        (
            ps.completions_total,
            "completion events (no companion steps: each stands for its work request)".to_string(),
        )
    };
    let total: u64 = ps.data_phase_syscalls.values().sum();
    let doorbells = ps.data_phase_syscalls.get("write[uverbs]").copied().unwrap_or(0);
    let reads = ps.data_phase_syscalls.get("read[comp_channel]").copied().unwrap_or(0);
    let mut x = Explanation {
        occurrence: format!(
            "The data phase of {} [{}]: {wr} {counted_as}.",
            crate::pipeline::render::printable(&ps.comm),
            ps.pid
        ),
        ..Default::default()
    };
    let v = &mut x.values;
    v.insert("work_requests".into(), wr);
    v.insert("sends_posted".into(), sends);
    v.insert("receives_posted".into(), recvs);
    v.insert("syscalls".into(), total);
    v.insert("doorbell_writes".into(), doorbells);
    v.insert("channel_reads".into(), reads);
    let ratio = |n: u64, d: u64| if d > 0 { format!("{:.2}", n as f64 / d as f64) } else { "-".into() };
    let per = |n: u64| ratio(n, wr);
    let mut seen: Vec<String> = ps.data_phase_syscalls.iter().map(|(k, n)| format!("{n:>6}  {k}")).collect();
    seen.push(format!("{total} syscalls: {} per work request", per(total)));
    x.stages.push(Stage {
        title: "The data phase's syscalls, this run".into(),
        seen,
        text: L::BYPASS_WHY.into(),
        ..Default::default()
    });
    x.stages.push(Stage {
        title: "The doorbell".into(),
        seen: vec![
            format!(
                "{doorbells} write(2) on the uverbs fd: {} per send work request (soft-RoCE's doorbell)",
                ratio(doorbells, sends)
            ),
            receives(input, ps.pid, recvs),
        ],
        text: L::BYPASS_HW.into(),
        ..Default::default()
    });
    let mode = input.steps.iter().find_map(|s| s.config.as_ref()).map(|c| c.mode);
    let how = match mode {
        Some(Mode::Events) => {
            format!("The companion ran in event mode: {reads} read(2) on its completion channel.")
        }
        Some(Mode::Poll) => {
            format!("The companion ran busy-polling: {reads} read(2) on a completion channel.")
        }
        None => format!("{reads} read(2) on a completion channel."),
    };
    x.notes.push(("Event mode against busy polling".into(), format!("{how} {}", L::POLL_VS_EVENT)));
    Ok(x)
}

/// What posting the receives cost in syscalls (the events inside the companion's
/// post_recv steps).
fn receives(input: &Input, pid: crate::event::Task, recvs: u64) -> String {
    let steps = input.steps.iter().filter(|s| s.process() == pid && s.name == StepName::PostRecv);
    let calls: usize = steps
        .map(|s| {
            input
                .events
                .iter()
                .filter(|e| {
                    e.thread() == s.thread()
                        && e.kind == EventKind::SyscallEnter
                        && (s.t_start_ns..=s.t_end_ns).contains(&e.ts_ns)
                })
                .count()
        })
        .sum();
    match (recvs, calls) {
        (0, _) => "no receive work requests posted by the companion".into(),
        (n, 0) => format!(
            "{n} receive work requests posted with no syscall at all (written into the mapped receive queue)"
        ),
        (n, c) => format!("{n} receive work requests posted with {c} syscalls"),
    }
}

pub(super) fn fork(input: &Input) -> Result<Explanation, Missing> {
    let c = input.run_counts.unwrap_or_else(|| RunCounts::of(input.events));
    if c.syscalls == 0 {
        return Err(Missing::Syscalls);
    }
    let (madvise, dontfork, pins) = (c.madvise, c.dontfork, c.pins);
    let mut x = Explanation {
        occurrence: format!(
            "This run: {pins} pins, {madvise} madvise calls, {dontfork} of them MADV_DONTFORK."
        ),
        ..Default::default()
    };
    x.values.insert("madvise".into(), madvise);
    x.values.insert("madvise_dontfork".into(), dontfork);
    x.values.insert("pins".into(), pins);
    x.stages.push(Stage {
        title: "What fork() would do to a registered buffer".into(),
        seen: vec![format!("{dontfork} ranges marked MADV_DONTFORK around {pins} registrations")],
        text: L::FORK_WHY.into(),
        ..Default::default()
    });
    let kernel = input.header.map(|h| format!("Linux {}", h.kernel_release)).unwrap_or("The kernel".into());
    let said = match input.header.and_then(|h| h.copy_on_fork) {
        Some(true) => format!("{kernel} said copy-on-fork on (rdma sys show) when the capture started."),
        Some(false) => format!("{kernel} said copy-on-fork off (rdma sys show): libibverbs must mark the ranges."),
        None => "This capture does not record the kernel's copy-on-fork (captures of this version do, from rdma sys show).".into(),
    };
    x.stages.push(Stage {
        title: "Copy-on-fork kernels".into(),
        seen: vec![said],
        text: L::FORK_COW.into(),
        ..Default::default()
    });
    Ok(x)
}
