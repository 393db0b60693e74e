//! Decoded records → events: names from the plan, values rendered into fields, stacks
//! symbolized, the execution context classified, syscall fds recognised.

use crate::event::FieldId;
use crate::event::{Event, EventKind, ExecContext, FORMAT_VERSION, Name};
use crate::pipeline::decode::Raw;
use crate::pipeline::fds::FdCache;
use crate::pipeline::ksyms::Ksyms;
use crate::pipeline::render;
use crate::plan::catalog::{Field, Path, ProbeId};
use crate::plan::select::Plan;
use crate::plan::syscalls;
use std::collections::BTreeMap;

/// Turns decoded records into events: names, rendered values, symbols, fds, cgroups.
pub struct Enricher<'a> {
    pub plan: &'a Plan,
    pub ksyms: &'a Ksyms,
    pub fds: FdCache,
    pub memlock: crate::pipeline::limits::MemlockCache,
    pub frames: crate::pipeline::ksyms::StackCache,
    pub cgroups: crate::pipeline::cgroups::CgroupCache,
}

fn comm(c: &[u8; 16]) -> crate::event::Comm {
    let n = c.iter().position(|&b| b == 0).unwrap_or(c.len());
    crate::event::Comm::new(&String::from_utf8_lossy(&c[..n]))
}

/// Frames that show softirq processing (a prefix each).
pub(crate) const SOFTIRQ_FRAMES: [&str; 4] =
    ["handle_softirqs", "__do_softirq", "tasklet_action", "net_rx_action"];

/// softirq when the stack shows softirq processing, kworker by thread name, else process.
pub(crate) fn classify<S: AsRef<str>>(comm: &str, stack: &[S]) -> ExecContext {
    if stack.iter().any(|f| SOFTIRQ_FRAMES.iter().any(|s| f.as_ref().starts_with(s))) {
        ExecContext::Softirq
    } else if comm.starts_with("kworker") {
        ExecContext::Kworker
    } else {
        ExecContext::Process
    }
}

/// A step record the companion's marker carried: its JSON, of the version this build reads.
pub fn step(json: &[u8]) -> Option<crate::steps::StepRecord> {
    serde_json::from_slice::<crate::steps::StepRecord>(json).ok().filter(|s| s.v == crate::steps::VERSION)
}

impl Enricher<'_> {
    /// The event of a decoded record, or none for one that makes no event.
    pub fn event(&mut self, raw: &Raw) -> Option<Event> {
        let h = raw.header();
        let mut ev = Event {
            v: FORMAT_VERSION,
            ts_ns: h.ts_ns,
            kind: EventKind::Entry,
            name: Name::default(),
            symbol: None,
            path: Path::Syscall,
            pid: h.tgid,
            tid: h.tid,
            host: 0,
            comm: comm(&h.comm),
            cpu: h.cpu,
            fields: Default::default(),
            unreadable: Vec::new(),
            not_followed: Vec::new(),
            stack: Default::default(),
            context: None,
            fd_kind: None,
            latency_ns: None,
            seq: None,
            errors: BTreeMap::new(),
            cgroup_id: (h.cgroup_id != 0).then_some(h.cgroup_id),
            cgroup: None,
        };
        if h.cgroup_id != 0 {
            ev.cgroup = self.cgroups.path(h.cgroup_id);
        }
        match raw {
            Raw::Probe { hdr, is_return, vals, stack } => {
                self.probe(&mut ev, hdr, *is_return, vals, *stack)?
            }
            Raw::Syscall { is_exit, nr, args, path, .. } => {
                self.syscall(&mut ev, *is_exit, *nr, args, path.as_deref())?
            }
            // Not an event: see `step`.
            Raw::Step { .. } => return None,
        }
        Some(ev)
    }

    /// A kernel or libibverbs probe record: names and rendered values from the plan.
    fn probe(
        &mut self,
        ev: &mut Event,
        hdr: &rdma_trace_common::EventHeader,
        is_return: bool,
        vals: &[u64; rdma_trace_common::MAX_FETCH],
        stack: super::decode::Stack,
    ) -> Option<()> {
        let p = self.plan.by_slot(hdr.slot as usize)?;
        let (fields, plan): (&[Field], _) =
            if is_return { (p.spec.ret, p.ret.as_ref()?) } else { (p.spec.entry, &p.entry) };
        ev.kind = if is_return { EventKind::Return } else { EventKind::Entry };
        ev.name = Name::Probe(p.spec.id);
        ev.symbol = Some(p.symbol.into());
        ev.path = p.spec.path;
        // One more for what the correlator derives (a pin's pages).
        ev.fields = crate::event::Fields::with_capacity(fields.len() + 1);
        for (i, f) in fields.iter().enumerate() {
            if hdr.fail_mask & (1 << i) != 0 {
                ev.unreadable.push(f.name().to_string());
                continue;
            }
            if hdr.skip_mask & (1 << i) != 0 {
                ev.not_followed.push(f.name().to_string());
                continue;
            }
            let v = render::store(f.render, vals[i], plan.fetches[i].size);
            ev.fields.insert(f.id, v);
        }
        // The completion channel is made by an ioctl, not an open: its fd is what
        // libibverbs returns.
        if is_return
            && p.spec.id == ProbeId::IbvCreateCompChannel
            && let Some(crate::event::Value::U(fd)) = ev.fields.get(FieldId::Fd)
        {
            self.fds.bind(hdr.tgid, fd, crate::event::FdKind::CompChannel);
        }
        ev.stack = self.frames.stack(self.ksyms, stack.bytes());
        // What the pin is charged against: the probe reads it from the task at the pin;
        // /proc (while the process lives) only where that read did not happen.
        if p.spec.id == ProbeId::UmemGet
            && !is_return
            && !ev.fields.contains(FieldId::MemlockLimit)
            && let Some(limit) = self.memlock.of(hdr.tgid)
        {
            ev.fields.insert(FieldId::MemlockLimit, crate::event::Value::U(limit));
            ev.unreadable.retain(|f| f != FieldId::MemlockLimit.as_str());
        }
        if !is_return {
            ev.context = Some(classify(&ev.comm, &ev.stack));
        }
        Some(())
    }

    /// A watched process's syscall: argument names, and what its fd is.
    fn syscall(
        &mut self,
        ev: &mut Event,
        is_exit: bool,
        nr: u64,
        args: &[u64; 6],
        path: Option<&str>,
    ) -> Option<()> {
        let (tgid, tid) = (ev.pid, ev.tid);
        let spec = syscalls::by_nr(nr)?;
        ev.kind = if is_exit { EventKind::SyscallExit } else { EventKind::SyscallEnter };
        ev.name = Name::Other(spec.name.into());
        ev.fields = crate::event::Fields::with_capacity(spec.args.len());
        ev.path = Path::Syscall;
        let opens = spec.name == "open" || spec.name == "openat";
        let may_return_fd = opens || matches!(spec.name, "dup" | "dup2" | "dup3" | "fcntl");
        if is_exit {
            ev.fields.insert(FieldId::Ret, crate::event::Value::I(args[0] as i64));
            // Binds the new fd if the entry said what it will be.
            if may_return_fd {
                self.fds.opened(tgid, tid, args[0] as i64);
            }
        } else {
            match (opens, path) {
                (true, Some(p)) => {
                    self.fds.opening(tid, p);
                    ev.fd_kind = Some(crate::event::FdKind::of_target(p));
                }
                (true, None) => self.fds.opening_unknown(tid),
                _ => {}
            }
            for (i, a) in spec.args.iter().enumerate() {
                ev.fields.insert(*a, crate::event::Value::U(args[i]));
            }
            if let Some(i) = spec.fd_arg {
                if spec.name == "close" {
                    ev.fd_kind = self.fds.forget(tgid, args[i]);
                } else {
                    ev.fd_kind = self.fds.kind(tgid, args[i]);
                    let dups = matches!(spec.name, "dup" | "dup2" | "dup3")
                        || (spec.name == "fcntl"
                            && matches!(args[1] as i32, libc::F_DUPFD | libc::F_DUPFD_CLOEXEC));
                    if dups {
                        self.fds.duping(tgid, tid, args[i]);
                    }
                }
            }
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_contexts() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            classify(
                "kworker/u8:2",
                &s(&["ib_uverbs_comp_handler+0x0 [ib_uverbs]", "rxe_cq_post+0x1 [rdma_rxe]"])
            ),
            ExecContext::Kworker
        );
        assert_eq!(
            classify(
                "swapper/0",
                &s(&[
                    "ib_uverbs_comp_handler+0x0",
                    "mlx5_cq_tasklet_cb+0x9",
                    "tasklet_action_common+0x1",
                    "handle_softirqs+0x2"
                ])
            ),
            ExecContext::Softirq
        );
        assert_eq!(classify("ib_write_bw", &s(&["ib_uverbs_mmap+0x0"])), ExecContext::Process);
    }
}
