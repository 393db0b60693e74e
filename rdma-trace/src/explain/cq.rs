//! The completion path, walked through one real completion event: the arming, the post
//! that caused it, where the NIC's side ran (read from the event's own frames, never from
//! the kernel series), the handler, and the program's wakeup.

use super::parts::Missing;
use super::parts::{Explanation, Input, Stage, fields, named, named_frames, syscall_line};
use crate::event::FieldId;
use crate::event::{Event, EventKind, ProbeId};
use crate::explain::lessons as L;
use crate::steps::StepName;
use crate::units::duration as us;

pub(super) fn cq(input: &Input) -> Result<Explanation, Missing> {
    let ev = input.events;
    let found = chosen_completion(input);
    let Some((ps, c)) = found else {
        return Err(Missing::WokenCompletion);
    };
    let comp = &ev[c.event];
    let mut x = Explanation {
        occurrence: format!(
            "One real completion event: CQ {:#x} of {} [{}], raised by {} [{}].",
            c.cq_user_handle,
            crate::pipeline::render::printable(&ps.comm),
            input.who(ps.pid),
            crate::pipeline::render::printable(&comp.comm),
            input.who(comp.thread())
        ),
        ..Default::default()
    };
    x.values.insert("cq_handle".into(), c.cq_user_handle);
    let arm = cq_arm(input, comp, c.cq_user_handle, &mut x);
    x.stages.push(arm);
    if let Some(post) = cq_post(input, c.event, &mut x) {
        x.stages.push(post);
    }
    x.stages.push(cq_nic_side(input, comp));
    x.stages.push(cq_handler(input, c.event));
    let w = c.wakeup.unwrap_or(c.event);
    let read = &ev[w];
    let mut wake = Stage { title: "The wakeup — the channel read returns".into(), ..Default::default() };
    wake.functions.push(named(read.symbol.as_deref().unwrap_or("ib_uverbs_comp_event_read")));
    let lat = c.wakeup_latency_ns.unwrap_or(0);
    wake.seen.push(format!(
        "{} [{}] thread {}: {} after the completion event",
        read.name,
        input.who(read.process()),
        read.tid,
        us(lat)
    ));
    x.values.insert("wakeup_ns".into(), lat);
    wake.text = L::CQ_LATER.into();
    x.stages.push(wake);
    let library = input.enclosing(w, |e| e.is(ProbeId::IbvGetCqEvent) && e.kind == EventKind::Entry);
    if let Some((_, g)) = library.and_then(|(i, _)| input.return_of(i)) {
        x.stages.push(Stage {
            title: "Back in the program — ibv_get_cq_event returns".into(),
            seen: vec![format!("{} after the read", us(g.ts_ns.saturating_sub(read.ts_ns)))],
            ..Default::default()
        });
    }
    // The same percentiles as `report` (nearest rank).
    let mut d = crate::pipeline::correlate::aggregate::Dist::default();
    ps.wakeup_latencies_ns.iter().for_each(|ns| d.observe(*ns));
    if let (Some(mid), Some(p99)) = (d.quantile(0.5), d.quantile(0.99)) {
        x.values.insert("wakeups".into(), d.count);
        x.notes.push((
            format!("This process's {} wakeups", d.count),
            format!("median {}, p99 {}, slowest {}.", us(mid), us(p99), us(d.max_ns)),
        ));
    }
    Ok(x)
}

type Woke<'a> =
    (&'a crate::pipeline::correlate::story::ProcessStory, &'a crate::pipeline::correlate::story::Completion);

/// The completion to explain: with an anchor, the completion it is, the wakeup it is, or
/// the nearest on its thread (the kworker's or the program's); else the run's first that
/// woke a program.
fn chosen_completion<'a>(input: &Input<'a>) -> Option<Woke<'a>> {
    let woke: Vec<Woke<'a>> = input
        .story
        .processes
        .values()
        .flat_map(|p| p.completions.iter().map(move |c| (p, c)))
        .filter(|(_, c)| c.wakeup.is_some())
        .collect();
    let chosen = input.anchor.and_then(|a| {
        let exact = woke.iter().find(|(_, c)| c.event == a || c.wakeup == Some(a));
        let mut at: Vec<usize> = woke.iter().map(|(_, c)| c.event).collect();
        at.sort_unstable();
        let by_handler = input.anchored(&at).and_then(|e| woke.iter().find(|(_, c)| c.event == e));
        let mut reads: Vec<usize> = woke.iter().filter_map(|(_, c)| c.wakeup).collect();
        reads.sort_unstable();
        let by_read = input.anchored(&reads).and_then(|w| woke.iter().find(|(_, c)| c.wakeup == Some(w)));
        exact.or(by_handler).or(by_read).copied()
    });
    // Else the first that followed a post, where the posts were seen (soft-RoCE's doorbell).
    let joined = |c: &crate::pipeline::correlate::story::Completion| {
        input.story.qps.joins.iter().any(|j| j.completion == c.event)
    };
    chosen.or(woke.iter().find(|(_, c)| joined(c)).copied()).or(woke.first().copied())
}

/// The post that completion `i` followed (`correlate::qps`): on the peer QP (on another
/// host, when the captures of both were merged) or the QP's own send.
fn cq_post(input: &Input, i: usize, x: &mut Explanation) -> Option<Stage> {
    let j = input.story.qps.joins.iter().find(|j| j.completion == i)?;
    let post = input.events.get(j.post)?;
    let comp = input.events.get(i)?;
    let title = if j.across {
        "The post — a send on the peer QP, then the wire"
    } else {
        "The post — this QP's own send, acknowledged"
    };
    let mut st = Stage { title: title.into(), ..Default::default() };
    let function = post.symbol.as_deref().unwrap_or(post.name.as_str());
    st.functions.push(named(function));
    st.seen.push(format!(
        "{function}({}) by {} [{}]",
        fields(post, &[FieldId::QpNum]),
        crate::pipeline::render::printable(&post.comm),
        input.who(post.process())
    ));
    let here = input.host(comp.process());
    let other = comp.host != post.host;
    let clock = match input.clock_error_ns {
        Some(e) if other => format!(" (on one clock to ± {}: the measured offset's error bar)", us(e)),
        None if other => " (the hosts' clocks not measured: placed on their wall clocks)".into(),
        _ => String::new(),
    };
    st.seen.push(format!(
        "{} later, this completion{}{clock}",
        us(j.latency_ns),
        here.map(|h| format!(" on {h}")).unwrap_or_default()
    ));
    x.values.insert("post_to_completion_ns".into(), j.latency_ns);
    x.values.insert("post_qp_num".into(), post.field(FieldId::QpNum).unwrap_or(0));
    st.text = L::CQ_POST.into();
    Some(st)
}

/// Arming: the companion's last `req_notify_cq` step on this CQ before the completion, and
/// the system calls it made. No probe sees the call itself: ibv_req_notify_cq is inline in
/// libibverbs and goes straight to the provider.
fn cq_arm(input: &Input, comp: &Event, cq: u64, x: &mut Explanation) -> Stage {
    let mut st =
        Stage { title: "Arming — ibv_req_notify_cq".into(), text: L::CQ_ARM.into(), ..Default::default() };
    let arming = input.story.steps.iter().rev().find(|j| {
        input.steps.get(j.step).is_some_and(|s| {
            s.name == StepName::ReqNotifyCq
                && s.cq.as_ref().is_some_and(|c| c.handle == cq)
                && s.t_start_ns <= comp.ts_ns
        })
    });
    let Some(j) = arming else {
        st.seen.push(format!("(no companion step says when it armed: {})", L::CQ_ARM_WAYS));
        return st;
    };
    let calls: Vec<&Event> = j
        .events
        .iter()
        .filter_map(|&i| input.events.get(i))
        .filter(|e| e.kind == EventKind::SyscallEnter)
        .collect();
    x.values.insert("arm_syscalls".into(), calls.len() as u64);
    st.seen.extend(calls.iter().map(|e| syscall_line(e)));
    let watched = || input.events.iter().any(|e| e.kind == EventKind::SyscallEnter);
    st.seen.push(match calls.len() {
        0 if watched() => "no system call: the provider armed the CQ in user space".into(),
        0 => format!("(syscalls were not watched in this capture; {})", L::CQ_ARM_WAYS),
        1 => "the provider armed the CQ through the kernel: one system call inside ibv_req_notify_cq".into(),
        n => format!("the provider armed the CQ through the kernel: {n} system calls"),
    });
    st
}

/// Where a completion's handler ran, read from its own frames and thread.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum RanIn {
    /// A kworker running queued work.
    Kworker,
    /// A softirq (a tasklet's, when `tasklet`) that a program's system call ran when it
    /// re-enabled bottom halves: no interrupt between. `syscall` is "write(2)", or "system
    /// call" where no frame names it.
    SoftirqInSyscall { syscall: String, tasklet: bool },
    /// Inside a program's system call, with no softirq or interrupt between.
    InSyscall { syscall: String },
    /// The softirq on the way out of an interrupt (a tasklet's, when `tasklet`).
    SoftirqAfterInterrupt { tasklet: bool },
    /// ksoftirqd: softirqs deferred to their per-CPU thread.
    Ksoftirqd,
    /// A hard interrupt's handler itself.
    Hardirq,
    /// No frames kept, or none that say.
    Unknown,
}

/// `RanIn` from an event's thread name and its kernel stack (innermost first,
/// `function+0xoff [module]`).
pub(super) fn ran_in<S: AsRef<str>>(comm: &str, stack: &[S]) -> RanIn {
    let fns: Vec<&str> = stack.iter().map(|f| crate::explain::frames::function(f.as_ref())).collect();
    let has = |p: &str| fns.iter().any(|f| f.starts_with(p));
    let softirq = crate::pipeline::enrich::SOFTIRQ_FRAMES.iter().any(|p| has(p));
    let tasklet = has("tasklet_action");
    let interrupt =
        has("common_interrupt") || has("asm_common_interrupt") || has("sysvec_") || has("irq_exit");
    // The system call, named where a frame names it (`ksys_write`: 6.1 has no
    // `__x64_sys_write` frame), else only that there was one.
    let named = fns.iter().rev().find_map(|f| {
        ["__x64_sys_", "__ia32_sys_", "__arm64_sys_", "__se_sys_", "__do_sys_", "ksys_"]
            .iter()
            .find_map(|p| f.strip_prefix(p))
            .map(|n| format!("{}(2)", n.split('.').next().unwrap_or(n)))
    });
    let syscall =
        named.or_else(|| (has("do_syscall_64") || has("entry_SYSCALL")).then(|| "system call".into()));
    match () {
        _ if stack.is_empty() => RanIn::Unknown,
        _ if softirq && (comm.starts_with("ksoftirqd") || has("run_ksoftirqd")) => RanIn::Ksoftirqd,
        _ if softirq && interrupt => RanIn::SoftirqAfterInterrupt { tasklet },
        _ if softirq => match syscall {
            Some(syscall) => RanIn::SoftirqInSyscall { syscall, tasklet },
            None => RanIn::SoftirqAfterInterrupt { tasklet },
        },
        _ if interrupt => RanIn::Hardirq,
        _ if has("process_one_work") || comm.starts_with("kworker") => RanIn::Kworker,
        _ => match syscall {
            Some(syscall) => RanIn::InSyscall { syscall },
            None => RanIn::Unknown,
        },
    }
}

/// Where the completion was noticed: said from the event's frames, with the frames.
fn cq_nic_side(input: &Input, comp: &Event) -> Stage {
    let who = crate::pipeline::render::printable(&comp.comm);
    let ran = ran_in(&comp.comm, &comp.stack);
    let (where_, why) = match &ran {
        RanIn::Kworker => ("in a kworker, not in the program".to_string(), L::CQ_IN_KWORKER),
        RanIn::SoftirqInSyscall { syscall, tasklet } => (
            format!("in a {} inside {who}'s own {syscall}", if *tasklet { "tasklet" } else { "softirq" }),
            L::CQ_IN_SYSCALL_SOFTIRQ,
        ),
        RanIn::InSyscall { syscall } => (format!("inside {who}'s own {syscall}"), L::CQ_IN_SYSCALL),
        RanIn::SoftirqAfterInterrupt { tasklet } => (
            format!(
                "in a {} after an interrupt, not in the program",
                if *tasklet { "tasklet" } else { "softirq" }
            ),
            L::CQ_IN_SOFTIRQ,
        ),
        RanIn::Ksoftirqd => ("in ksoftirqd, not in the program".to_string(), L::CQ_IN_KSOFTIRQD),
        RanIn::Hardirq => ("in the interrupt itself".to_string(), L::CQ_IN_HARDIRQ),
        RanIn::Unknown => ("where, the capture does not say".to_string(), L::CQ_RAN_UNKNOWN),
    };
    let mut worker = Stage { title: format!("The NIC's side — {where_}"), ..Default::default() };
    worker.seen.push(format!("{who} [{}] on CPU {}", input.who(comp.thread()), comp.cpu));
    worker.functions =
        named_frames(&comp.stack).into_iter().filter(|f| f.function != "ib_uverbs_comp_handler").collect();
    worker.text = format!("{} {why}", L::CQ_CONTEXT);
    worker
}

/// ib_uverbs_comp_handler at `i`: its arguments and how long it ran.
fn cq_handler(input: &Input, i: usize) -> Stage {
    let comp = &input.events[i];
    let mut handler = Stage { title: "The handler — the event is queued".into(), ..Default::default() };
    handler.functions.push(named("ib_uverbs_comp_handler"));
    handler
        .seen
        .push(format!("ib_uverbs_comp_handler({})", fields(comp, &[FieldId::CqUserHandle, FieldId::Cqe])));
    if let Some((_, r)) = input.return_of(i) {
        handler.seen.push(format!("queued and woke the reader in {}", us(r.latency_ns.unwrap_or(0))));
    }
    handler
}

#[cfg(test)]
mod tests {
    use super::{RanIn, ran_in};

    #[test]
    fn where_a_completion_ran_is_read_from_its_frames() {
        // companion-7.3.jsonl, the first comp_handler: soft-RoCE's task as queued work.
        let kworker = [
            "ib_uverbs_comp_handler+0x5 [ib_uverbs]",
            "rxe_cq_post+0x127 [rdma_rxe]",
            "do_complete+0x1f6 [rdma_rxe]",
            "rxe_completer+0x8b1 [rdma_rxe]",
            "rxe_sender+0x1d [rdma_rxe]",
            "do_work+0x6c [rdma_rxe]",
            "process_one_work+0x1cd",
            "worker_thread+0x1af",
            "kthread+0xe5",
            "ret_from_fork+0x2bc",
        ];
        assert_eq!(ran_in("kworker/u8:2", &kworker), RanIn::Kworker);
        // mlx5 on hardware (kernel-facts: seed 002): the CQ's tasklet after the interrupt.
        let mlx5 = [
            "ib_uverbs_comp_handler+0x0 [ib_uverbs]",
            "mlx5_cq_tasklet_cb+0xb0 [mlx5_core]",
            "tasklet_action_common+0xc4",
            "handle_softirqs+0x100",
            "__irq_exit_rcu+0x5c",
            "irq_exit_rcu+0x10",
        ];
        assert_eq!(ran_in("swapper/3", &mlx5), RanIn::SoftirqAfterInterrupt { tasklet: true });
        // bookworm's 6.1 (lab_probes, ibv_rc_pingpong): the CQ's tasklet, run in the softirq
        // the poster's write(2) ran as it re-enabled bottom halves in a route lookup.
        let in_write = [
            "ib_uverbs_comp_handler+0x1 [ib_uverbs]",
            "tasklet_action_common.constprop.0+0xc7",
            "handle_softirqs+0xd7",
            "do_softirq.part.0+0x5f",
            "__local_bh_enable_ip+0x64",
            "rt_set_nexthop.constprop.0+0x136",
            "ip_route_output_key_hash_rcu+0x484",
            "ip_route_output_flow+0x66",
            "rxe_find_route+0xd0 [rdma_rxe]",
            "rxe_prepare+0x85 [rdma_rxe]",
            "prepare_ack_packet+0xf3 [rdma_rxe]",
            "send_common_ack.isra.0+0x48 [rdma_rxe]",
            "rxe_responder+0x10ea [rdma_rxe]",
            "rxe_do_task+0x86 [rdma_rxe]",
            "rxe_xmit_packet+0xf9 [rdma_rxe]",
            "rxe_requester+0x65c [rdma_rxe]",
            "rxe_do_task+0x86 [rdma_rxe]",
            "rxe_post_send+0x28d [rdma_rxe]",
            "ib_uverbs_post_send+0x6a3 [ib_uverbs]",
            "ib_uverbs_write+0x40e [ib_uverbs]",
            "vfs_write+0xc7",
            "ksys_write+0xb7",
            "do_syscall_64+0x5d",
            "entry_SYSCALL_64_after_hwframe+0x6e",
        ];
        assert_eq!(
            ran_in("ibv_rc_pingpong", &in_write),
            RanIn::SoftirqInSyscall { syscall: "write(2)".into(), tasklet: true }
        );
        let unnamed = [
            "ib_uverbs_comp_handler+0x1",
            "tasklet_action_common+0xc7",
            "handle_softirqs+0xd7",
            "do_syscall_64+0x5d",
        ];
        assert_eq!(
            ran_in("a", &unnamed),
            RanIn::SoftirqInSyscall { syscall: "system call".into(), tasklet: true }
        );
        let none: [&str; 0] = [];
        assert_eq!(ran_in("kworker/0:1", &none), RanIn::Unknown);
    }
}
