//! What a uverbs mapping maps. mlx5 says it in the offset (`plan::mlx5::pgoff`). Soft-RoCE
//! hands each queue buffer a key when the queue is made (`rxe_create_mmap_info`, probe
//! `rxe_mmap_info`), returns it in the create command's reply, and the provider library
//! mmaps the key at once (`rxe_mmap` looks it up by user context and `vm_pgoff << 12`).
//! This joins the three, and names the queue's object by the verbs call that made it.
//!
//! Pure and bounded: events in, `Named` updates out (a mapping named, or its object learned
//! later, when the verbs call returns), for whoever keeps mapping rows.

use crate::event::FieldId;
use crate::event::Task;
use crate::event::{Event, EventKind, ProbeId};
use crate::steps::{StepName, StepRecord};
use crate::util::push_capped;
use std::collections::{HashMap, VecDeque};

/// Queues remembered (keys waiting for their mmap, mappings waiting for their object).
const KEEP: usize = 1024;

/// Which of a verbs object's buffers a key is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueKind {
    /// A CQ's ring of completion entries.
    Cq,
    /// A QP's send queue (work requests the program posts).
    Sq,
    /// A QP's receive queue.
    Rq,
    /// A shared receive queue.
    Srq,
    /// The new ring of a CQ or SRQ resized after it was made.
    Resized,
}

impl QueueKind {
    /// A few words, for counting mappings by kind.
    pub(crate) fn short(self) -> &'static str {
        match self {
            QueueKind::Cq => "CQ ring",
            QueueKind::Sq => "send queue",
            QueueKind::Rq => "receive queue",
            QueueKind::Srq => "SRQ",
            QueueKind::Resized => "resized ring",
        }
    }

    fn of_qp(self) -> bool {
        matches!(self, QueueKind::Sq | QueueKind::Rq)
    }

    /// What one entry of the ring is called.
    fn entry(self) -> &'static str {
        match self {
            QueueKind::Cq => "CQEs",
            QueueKind::Sq | QueueKind::Rq | QueueKind::Srq => "WQEs",
            QueueKind::Resized => "entries",
        }
    }

    /// The function above `do_mmap_info` on the stack says which queue (the QP's two are
    /// told apart by their order: see `Namer::entry`).
    fn from_stack<S: AsRef<str>>(stack: &[S]) -> Option<(Self, u64)> {
        stack.iter().find_map(|f| {
            let (func, rest) = f.as_ref().split_once('+')?;
            let off = rest
                .split(['/', ' '])
                .next()
                .and_then(|o| u64::from_str_radix(o.trim_start_matches("0x"), 16).ok());
            let kind = match func {
                "rxe_cq_from_init" => QueueKind::Cq,
                "rxe_qp_from_init" => QueueKind::Sq,
                "rxe_srq_from_init" => QueueKind::Srq,
                "rxe_queue_resize" => QueueKind::Resized,
                _ => return None,
            };
            Some((kind, off.unwrap_or(0)))
        })
    }
}

/// The verbs object a queue belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Object {
    /// A CQ, by the program's handle (`struct ibv_cq *`).
    Cq(u64),
    /// A CQ by the kernel's `struct ib_cq *` (its user handle not seen).
    KernelCq(u64),
    /// A QP, by its number.
    Qp(u32),
}

impl Object {
    /// Whether a queue of `kind` can be this object's.
    fn fits(self, kind: QueueKind) -> bool {
        match self {
            Object::Cq(_) | Object::KernelCq(_) => kind == QueueKind::Cq,
            Object::Qp(_) => kind.of_qp(),
        }
    }
}

/// One queue buffer rxe mapped into a program.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Queue {
    pub kind: QueueKind,
    /// The key (`vm_pgoff << 12`).
    pub key: u64,
    /// The buffer: a 384-byte header of indexes, then the ring.
    pub bytes: u64,
    /// Entries the ring holds (rxe keeps one slot free: slots − 1) and each one's size.
    pub entries: Option<u64>,
    pub entry_bytes: Option<u64>,
    pub object: Option<Object>,
}

impl Queue {
    /// In a few words, for a table column: the object and the ring's entries.
    pub(crate) fn brief(&self) -> String {
        let what = match (self.kind, self.object) {
            (QueueKind::Sq, Some(Object::Qp(n))) => format!("QP {n} send queue"),
            (QueueKind::Rq, Some(Object::Qp(n))) => format!("QP {n} recv queue"),
            (_, Some(Object::Cq(h))) => format!("CQ {h:#x} ring"),
            // Its program's handle never seen (no completion on it): the kernel's pointer,
            // said as such, so it is not taken for a handle the Completions screen lists.
            (_, Some(Object::KernelCq(c))) => format!("kernel CQ {c:#x} ring"),
            (kind, _) => kind.short().to_string(),
        };
        match self.entries {
            Some(n) => format!("{what}, {n} {}", self.kind.entry()),
            None => what,
        }
    }
}

impl std::fmt::Display for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let whose = match (self.kind, self.object) {
            (QueueKind::Sq, Some(Object::Qp(n))) => format!("the send queue of QP {n}"),
            (QueueKind::Rq, Some(Object::Qp(n))) => format!("the receive queue of QP {n}"),
            (_, Some(Object::Cq(h))) => format!("the ring of CQ {h:#x}"),
            (_, Some(Object::KernelCq(c))) => format!("the ring of kernel CQ {c:#x}"),
            (QueueKind::Sq, _) => "a QP's send queue".into(),
            (QueueKind::Rq, _) => "a QP's receive queue".into(),
            (QueueKind::Cq, _) => "a CQ's ring".into(),
            (QueueKind::Srq, _) => "a shared receive queue".into(),
            (QueueKind::Resized, _) => "the new ring of a resized CQ or SRQ".into(),
        };
        f.write_str(&whose)?;
        match (self.entries, self.entry_bytes) {
            (Some(n), Some(e)) => {
                write!(f, " ({n} {} of {e} B, {})", self.kind.entry(), crate::units::bytes(self.bytes))
            }
            _ => write!(f, " ({})", crate::units::bytes(self.bytes)),
        }
    }
}

/// A mapping named: the mapping at `start` in process `pid` is `queue` (sent again when
/// the queue's object is learned).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Named {
    pub pid: Task,
    pub start: u64,
    pub queue: Queue,
}

/// A key handed out, not yet returned from (`rxe_mmap_info` entry → return).
#[derive(Clone, Debug)]
struct Making {
    kind: QueueKind,
    size: u64,
    entries: Option<u64>,
    entry_bytes: Option<u64>,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Namer {
    /// Per thread: the key being made, the last QP queue's call-site offset (the SQ's
    /// call comes first in rxe_qp_from_init), and the kernel CQ being created.
    making: HashMap<Task, Making>,
    qp_site: HashMap<Task, u64>,
    creating_cq: HashMap<Task, u64>,
    /// Keys made, by (user context, key), oldest first.
    keys: VecDeque<((u64, u64), Queue, Task)>,
    /// Mapped queues whose object is not known yet: (pid, tid, start, queue, made at).
    waiting: VecDeque<(Task, Task, u64, Queue, u64)>,
    /// The companion's create steps: (tid, from, to, what it made).
    made_by_steps: VecDeque<(Task, u64, u64, Object)>,
}

impl Namer {
    pub(crate) fn event(&mut self, e: &Event) -> Vec<Named> {
        match (e.probe(), e.kind) {
            (Some(ProbeId::RxeCreateCq), EventKind::Entry) => {
                if let Some(cq) = e.field(FieldId::Cq) {
                    self.creating_cq.insert(e.thread(), cq);
                }
                Vec::new()
            }
            (Some(ProbeId::RxeMmapInfo), EventKind::Entry) => {
                self.entry(e);
                Vec::new()
            }
            (Some(ProbeId::RxeMmapInfo), EventKind::Return) => {
                self.made(e);
                Vec::new()
            }
            (Some(ProbeId::RxeMmap), EventKind::Entry) => self.mapped(e).into_iter().collect(),
            // A CQ known only by its kernel pointer (made by a call not probed, such as
            // ibv_create_cq_ex) gets the program's handle from its first completion.
            (Some(ProbeId::CompHandler), EventKind::Entry) => {
                let (Some(kernel), Some(h)) =
                    (e.field(FieldId::Cq), e.field(FieldId::CqUserHandle).filter(|h| *h != 0))
                else {
                    return Vec::new();
                };
                self.settle(|_, _, q| (q.object == Some(Object::KernelCq(kernel))).then_some(Object::Cq(h)))
            }
            (Some(ProbeId::IbvCreateCq), EventKind::Return) => {
                let cq = e.field(FieldId::Cq).filter(|h| *h != 0).map(Object::Cq);
                self.learn(e.thread(), 0, u64::MAX, |k| cq.filter(|o| o.fits(k)))
            }
            (Some(ProbeId::IbvCreateQp), EventKind::Return) => {
                let n = e.field(FieldId::QpNum).filter(|_| e.field(FieldId::Qp).is_some_and(|q| q != 0));
                let qp = n.and_then(|n| u32::try_from(n).ok()).map(Object::Qp);
                self.learn(e.thread(), 0, u64::MAX, |k| qp.filter(|o| o.fits(k)))
            }
            _ => Vec::new(),
        }
    }

    /// A companion step names what it made: the queues mapped on its thread inside it,
    /// now or when they are mapped (a step file is read before the events).
    pub(crate) fn step(&mut self, s: &StepRecord) -> Vec<Named> {
        let made = match (s.name, &s.cq, &s.qp) {
            (StepName::CreateCq, Some(cq), _) => Object::Cq(cq.handle),
            (StepName::CreateQp, _, Some(qp)) => Object::Qp(qp.qpn),
            _ => return Vec::new(),
        };
        push_capped(&mut self.made_by_steps, KEEP, (s.thread(), s.t_start_ns, s.t_end_ns, made));
        self.learn(s.thread(), s.t_start_ns, s.t_end_ns, |k| made.fits(k).then_some(made))
    }

    fn entry(&mut self, e: &Event) {
        let Some((mut kind, site)) = QueueKind::from_stack(&e.stack) else { return };
        if kind == QueueKind::Sq {
            // rxe_qp_from_init makes the SQ's key, then (without an SRQ) the RQ's, from a
            // later call site: a site past the thread's last QP key is that QP's RQ.
            let last = self.qp_site.insert(e.thread(), site);
            if last.is_some_and(|l| site > l) {
                kind = QueueKind::Rq;
                self.qp_site.remove(&e.thread());
            }
        }
        let size = e.field(FieldId::Size).unwrap_or(0);
        let slots = e.field(FieldId::IndexMask).map(|m| m + 1);
        let entry_bytes = e.field(FieldId::Log2ElemSize).filter(|l| *l < 32).map(|l| 1u64 << l);
        let entries = slots.map(|s| s - 1);
        self.making.insert(e.thread(), Making { kind, size, entries, entry_bytes });
    }

    fn made(&mut self, e: &Event) {
        let Some(m) = self.making.remove(&e.thread()) else { return };
        let (Some(context), Some(key)) = (e.field(FieldId::Context), e.field(FieldId::Key)) else { return };
        if e.field(FieldId::Info).and_then(crate::pipeline::render::err_ptr).is_some() {
            return;
        }
        let object = match m.kind {
            QueueKind::Cq => self.creating_cq.remove(&e.thread()).map(Object::KernelCq),
            _ => None,
        };
        let queue = Queue {
            kind: m.kind,
            key,
            // The buffer as made; the key covers it rounded up to pages (`info_size`).
            bytes: if m.size > 0 { m.size } else { e.field(FieldId::InfoSize).unwrap_or(0) },
            entries: m.entries,
            entry_bytes: m.entry_bytes,
            object,
        };
        push_capped(&mut self.keys, KEEP, ((context, key), queue, e.thread()));
    }

    fn mapped(&mut self, e: &Event) -> Option<Named> {
        let key = e.field(FieldId::VmPgoff)? * crate::units::PAGE;
        let context = e.field(FieldId::Context)?;
        let at = self.keys.iter().position(|(k, _, _)| *k == (context, key))?;
        let (_, mut queue, made_by) = self.keys.remove(at)?;
        let start = e.field(FieldId::VmStart)?;
        let by_step = self.made_by_steps.iter().find(|(tid, from, to, o)| {
            *tid == made_by && (*from..=*to).contains(&e.ts_ns) && o.fits(queue.kind)
        });
        if let Some((.., o)) = by_step {
            queue.object = Some(*o);
        }
        if !matches!(queue.object, Some(Object::Cq(_) | Object::Qp(_))) {
            push_capped(&mut self.waiting, KEEP, (e.process(), made_by, start, queue.clone(), e.ts_ns));
        }
        Some(Named { pid: e.process(), start, queue })
    }

    /// The object `of` gives a waiting queue's kind, for queues mapped on `tid` in
    /// `[from, to]`: each is named again, now with its object.
    fn learn(
        &mut self,
        tid: Task,
        from: u64,
        to: u64,
        of: impl Fn(QueueKind) -> Option<Object>,
    ) -> Vec<Named> {
        self.settle(|t, at, q| (t == tid && (from..=to).contains(&at)).then(|| of(q.kind)).flatten())
    }

    /// Waiting queues `to` gives an object (from the thread that made them, when they
    /// were mapped, and the queue): named again with it, and no longer waiting.
    fn settle(&mut self, to: impl Fn(Task, u64, &Queue) -> Option<Object>) -> Vec<Named> {
        let mut out = Vec::new();
        self.waiting.retain_mut(|(pid, t, start, q, at)| {
            let Some(o) = to(*t, *at, q) else { return true };
            q.object = Some(o);
            out.push(Named { pid: *pid, start: *start, queue: q.clone() });
            false
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_kind_from_the_frame_above_do_mmap_info() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let stack = s(&[
            "rxe_create_mmap_info+0x5 [rdma_rxe]",
            "do_mmap_info+0x29 [rdma_rxe]",
            "rxe_qp_from_init+0x502 [rdma_rxe]",
        ]);
        assert_eq!(QueueKind::from_stack(&stack), Some((QueueKind::Sq, 0x502)));
        let stack = s(&["do_mmap_info+0x29 [rdma_rxe]", "rxe_cq_from_init+0x9a [rdma_rxe]"]);
        assert_eq!(QueueKind::from_stack(&stack), Some((QueueKind::Cq, 0x9a)));
        assert_eq!(QueueKind::from_stack(&s(&["ib_uverbs_mmap+0x6c [ib_uverbs]"])), None);
    }

    #[test]
    fn says_the_object_and_the_ring() {
        let q = Queue {
            kind: QueueKind::Sq,
            key: 0xd5000,
            bytes: 384 + 128 * 256,
            entries: Some(127),
            entry_bytes: Some(256),
            object: Some(Object::Qp(17)),
        };
        assert_eq!(q.to_string(), "the send queue of QP 17 (127 WQEs of 256 B, 33152 bytes)");
        assert_eq!(q.brief(), "QP 17 send queue, 127 WQEs");
        let q =
            Queue { kind: QueueKind::Cq, object: Some(Object::Cq(0x55d0)), bytes: 8192, entries: None, ..q };
        assert_eq!(q.to_string(), "the ring of CQ 0x55d0 (8 KiB)");
    }
}
