//! Queue pairs, and both ends of a connection. A QP is known by its number on its host
//! (`modify_qp`, `rxe_post_send`: the kernel's `struct ib_qp`, with its send and receive
//! CQs). At RTR the application tells its kernel the peer's QP number and GID; two QPs
//! that name each other are the two ends of one connection, on one host or two (captures
//! merged by `report` keep each host's apart: `QpKey::host`).
//!
//! A completion on a CQ is joined to the post that can have caused it: on a QP's receive
//! CQ, the newest post on its peer (the message that arrived); on its send CQ, the newest
//! post on the QP itself (the send that was acknowledged). Events reach the story in time
//! order (its reorder window; across hosts the merged clock, placed by the measured
//! offset), so "the newest post so far" is the newest post before the completion. A
//! completion with no post before it on the QP it was joined through is counted apart:
//! across hosts, that says the clocks are placed wrong by more than the path's latency
//! (one on a QP in the error state is a flush). Where posts queue faster than they
//! complete, the newest post is later than the one whose message completed: the time
//! from it is a lower bound.
//!
//! Posts are seen where the kernel rings the doorbell: soft-RoCE's `rxe_post_send`. On a
//! ConnectX NIC the doorbell is an MMIO store and no kernel function runs: there are no
//! posts to join, and the rows say so by their zero.

use super::cqs::Samples;
use crate::capture::{QpCounts, QpState};
use crate::event::FieldId;
use crate::event::Task;
use crate::event::{Event, EventKind, ProbeId};
use crate::util::push_capped;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// `enum ib_qp_state`: RTR, the state at which the peer is named; ERR, where the work
/// requests still queued complete as flushed.
const IB_QPS_RTR: u64 = 2;
const IB_QPS_ERR: u64 = 6;
/// QP 0 and 1 are the management QPs (SMI, GSI) the kernel posts on itself (the
/// connection manager's datagrams, in whichever process asked for the connection): not
/// an application's QP, and never the end of a connection.
const FIRST_APP_QPN: u64 = 2;
/// `IB_QP_DEST_QPN` in `attr_mask`: `dest_qp_num` was given.
const IB_QP_DEST_QPN: u64 = 1 << 20;

pub use super::cqs::QpKey;

/// One QP: who drives it, its CQs, its peer, and its posts and completions joined.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct QpRow {
    pub key: QpKey,
    /// The process that modified or posted on it, on its host.
    pub pid: Task,
    pub comm: String,
    /// Kernel `struct ib_cq *`s (0: not seen yet).
    pub send_cq: u64,
    pub recv_cq: u64,
    /// `enum ib_qp_state` of the newest modify.
    pub state: Option<u64>,
    /// What the application gave at RTR: the remote QP number and the GID's two halves (as
    /// the kernel holds them).
    pub dest_qpn: Option<u32>,
    pub dgid: Option<(u64, u64)>,
    /// The QP at the other end, once both ends named each other.
    pub peer: Option<QpKey>,
    /// Its posts and completions, and what they were joined to.
    pub counts: QpCounts,
    /// The peer's post → a completion here; its own post → a completion here (the newest).
    pub across_ns: Samples,
    pub own_ns: Samples,
    /// The newest post: its time, and its event (none where it came before this story
    /// began, told by a daemon's state).
    #[serde(skip)]
    last_post: Option<(u64, Option<usize>)>,
    /// Of `peer_unknown`, those a daemon counted before this story began (seeded): its
    /// host alone could not see the peer. Once the peer is known they are what a receive
    /// on a connected QP is, a message its peer sent (the post itself was not seen here).
    #[serde(skip)]
    told_peer_unknown: u64,
}

impl QpRow {
    /// The IPv4 address in an IPv4-mapped GID (RoCE v2 over IPv4: `::ffff:a.b.c.d`).
    pub(crate) fn dest_ipv4(&self) -> Option<std::net::Ipv4Addr> {
        let (prefix, iid) = self.dgid?;
        let b = iid.to_le_bytes();
        (prefix == 0 && b[..4] == [0, 0, 0xff, 0xff]).then(|| std::net::Ipv4Addr::new(b[4], b[5], b[6], b[7]))
    }
}

/// A completion joined to the post that can have caused it (event indexes of the story).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PostJoin {
    pub post: usize,
    pub completion: usize,
    pub latency_ns: u64,
    /// The post was on the peer QP (on another host when the keys' hosts differ).
    pub across: bool,
}

/// The QP rows by key and the joins made (the newest, bounded).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct QpStory {
    pub rows: BTreeMap<QpKey, QpRow>,
    pub joins: VecDeque<PostJoin>,
    pub joins_total: u64,
}

/// The builder's side: which QPs each CQ serves.
#[derive(Default)]
pub(crate) struct Qps {
    /// (host, kernel CQ) → the QPs using it (send or receive).
    by_cq: HashMap<(u16, u64), Vec<QpKey>>,
}

impl Qps {
    /// Takes in event `i` (the next in time order). For a completion, returns the QP it
    /// was joined through and whether to a post on its peer (true) or its own (false).
    pub(crate) fn event(
        &mut self,
        story: &mut QpStory,
        cap: usize,
        i: usize,
        e: &Event,
    ) -> Option<(QpKey, bool)> {
        if e.kind != EventKind::Entry {
            return None;
        }
        if e.is(ProbeId::RxeCreateCq) || e.is(ProbeId::Mlx5CreateCq) {
            // A new CQ at an address ends whatever CQ was freed there before.
            let cq = e.field(FieldId::Cq)?;
            let host = e.host;
            for key in self.by_cq.remove(&(host, cq)).unwrap_or_default() {
                if let Some(row) = story.rows.get_mut(&key) {
                    for c in [&mut row.send_cq, &mut row.recv_cq] {
                        if *c == cq {
                            *c = 0;
                        }
                    }
                }
            }
        } else if e.is(ProbeId::ModifyQp) || e.is(ProbeId::RxePostSend) {
            let qpn = e.field(FieldId::QpNum).filter(|n| *n >= FIRST_APP_QPN)?;
            let key = QpKey { host: e.host, qpn: qpn as u32 };
            let row = story.rows.entry(key).or_insert_with(|| QpRow { key, ..Default::default() });
            (row.pid, row.comm) = (e.process(), e.comm.to_string());
            for (cq, now) in
                [(&mut row.send_cq, e.field(FieldId::SendCq)), (&mut row.recv_cq, e.field(FieldId::RecvCq))]
            {
                if let Some(c) = now.filter(|c| *c != 0 && *c != *cq) {
                    *cq = c;
                    let list = self.by_cq.entry((key.host, c)).or_default();
                    if !list.contains(&key) {
                        list.push(key);
                    }
                }
            }
            if e.is(ProbeId::RxePostSend) {
                row.counts.posts += 1;
                row.last_post = Some((e.ts_ns, Some(i)));
            } else {
                Self::modify(story, key, e);
            }
        } else if e.is(ProbeId::CompHandler) {
            return Self::completion(story, &self.by_cq, cap, i, e);
        }
        None
    }

    /// Forgets the QPs process `pid` drove (a retired process), and which CQs served them.
    pub(crate) fn retire(&mut self, story: &mut QpStory, pid: Task) {
        let gone: Vec<QpKey> = story.rows.values().filter(|r| r.pid == pid).map(|r| r.key).collect();
        if gone.is_empty() {
            return;
        }
        story.rows.retain(|_, r| r.pid != pid);
        self.by_cq.retain(|_, keys| {
            keys.retain(|k| !gone.contains(k));
            !keys.is_empty()
        });
    }

    /// A modify: the state, and at RTR the peer named (and paired once both ends agree).
    fn modify(story: &mut QpStory, key: QpKey, e: &Event) {
        let row = story.rows.get_mut(&key).expect("made by the caller");
        let state = e.field(FieldId::QpState);
        row.state = state.or(row.state);
        let mask = e.field(FieldId::AttrMask).unwrap_or(0);
        if state != Some(IB_QPS_RTR) || mask & IB_QP_DEST_QPN == 0 {
            return;
        }
        let dest = e.field(FieldId::DestQpNum).unwrap_or(0) as u32;
        row.dest_qpn = Some(dest);
        row.dgid = e.field(FieldId::DgidPrefix).zip(e.field(FieldId::DgidIid));
        Self::pair(story, key, dest);
    }

    /// The other end of `key`, told `dest` at RTR: a QP numbered `dest` that named this
    /// one. On one host first (a loopback connection), else on any other.
    fn pair(story: &mut QpStory, key: QpKey, dest: u32) {
        let mut ends =
            story.rows.values().filter(|r| r.key != key && r.key.qpn == dest && r.dest_qpn == Some(key.qpn));
        let peer =
            ends.clone().find(|r| r.key.host == key.host).or_else(|| ends.find(|r| r.key.host != key.host));
        if let Some(p) = peer.map(|r| r.key) {
            for (end, other) in [(key, p), (p, key)] {
                let row = story.rows.get_mut(&end).expect("both ends are rows");
                row.peer = Some(other);
                let told = std::mem::take(&mut row.told_peer_unknown);
                row.counts.peer_unknown -= told;
                row.counts.after_peer_post += told;
            }
        }
    }

    /// A completion on a CQ: joined to the newest post that can have caused it, of the QPs
    /// the CQ serves (the peer's post for a receive CQ, the QP's own for a send CQ), and
    /// counted once, on the QP of that post. A completion event names a CQ, not a QP: where
    /// one CQ serves several QPs (the companion's two QPs share their send CQ), the newest
    /// post among them is the one that can have caused it. With no post before it, it is
    /// counted on the first QP: a flush in ERR, a receive whose peer is not known, or
    /// before any post.
    fn completion(
        story: &mut QpStory,
        by_cq: &HashMap<(u16, u64), Vec<QpKey>>,
        cap: usize,
        i: usize,
        e: &Event,
    ) -> Option<(QpKey, bool)> {
        let cq = e.field(FieldId::Cq)?;
        let qps = by_cq.get(&(e.host, cq))?;
        let candidates = qps.iter().filter_map(|key| {
            let row = story.rows.get(key)?;
            let own = (row.send_cq == cq).then_some(row.last_post).flatten().map(|p| (p, false));
            let peer = row.peer.and_then(|p| story.rows.get(&p));
            let across =
                (row.recv_cq == cq).then(|| peer.and_then(|p| p.last_post)).flatten().map(|p| (p, true));
            Some([own, across].into_iter().flatten().map(move |c| (*key, c)))
        });
        let best = candidates.flatten().max_by_key(|(_, ((ts, _), _))| *ts);
        let Some((key, ((post_ts, post), across))) = best else {
            let first = qps.iter().find(|k| story.rows.contains_key(k))?;
            let row = story.rows.get_mut(first).expect("found");
            row.counts.completions += 1;
            if row.state == Some(IB_QPS_ERR) {
                row.counts.flushed += 1;
            } else if row.recv_cq == cq && row.peer.is_none() && row.send_cq != cq {
                row.counts.peer_unknown += 1;
            } else {
                row.counts.before_any_post += 1;
            }
            return None;
        };
        let row = story.rows.get_mut(&key).expect("a candidate's row");
        row.counts.completions += 1;
        let latency_ns = e.ts_ns.saturating_sub(post_ts);
        if across {
            row.counts.after_peer_post += 1;
            row.across_ns.push(latency_ns);
        } else {
            row.counts.after_own_post += 1;
            row.own_ns.push(latency_ns);
        }
        // A post from before this story began has no event to point at: counted, not listed.
        if let Some(post) = post {
            push_capped(&mut story.joins, cap, PostJoin { post, completion: i, latency_ns, across });
            story.joins_total += 1;
        }
        Some((key, across))
    }

    /// The QPs as a late subscriber is told them (`capture::State`): every row, its pid
    /// and times as this story has them.
    pub(crate) fn state(story: &QpStory) -> Vec<QpState> {
        story
            .rows
            .values()
            .map(|r| QpState {
                qpn: r.key.qpn,
                pid: r.pid.pid,
                host: r.pid.host,
                comm: r.comm.clone(),
                send_cq: r.send_cq,
                recv_cq: r.recv_cq,
                state: r.state,
                dest_qpn: r.dest_qpn,
                dgid: r.dgid.map(|(p, i)| [p, i]),
                last_post_ns: r.last_post.map(|(t, _)| t),
                counts: r.counts,
            })
            .collect()
    }

    /// What a daemon said existed when this story began: its QPs, their CQs, and their
    /// peers paired (with QPs seeded or seen before, on any host).
    pub(crate) fn seed(&mut self, story: &mut QpStory, qps: &[QpState]) {
        for q in qps {
            let key = QpKey { host: q.host, qpn: q.qpn };
            let row = story.rows.entry(key).or_insert_with(|| QpRow { key, ..Default::default() });
            *row = QpRow {
                key,
                pid: Task::new(q.host, q.pid),
                comm: q.comm.clone(),
                send_cq: q.send_cq,
                recv_cq: q.recv_cq,
                state: q.state,
                dest_qpn: q.dest_qpn,
                dgid: q.dgid.map(|[p, i]| (p, i)),
                peer: row.peer,
                counts: q.counts,
                last_post: q.last_post_ns.map(|t| (t, None)),
                told_peer_unknown: q.counts.peer_unknown,
                ..Default::default()
            };
            for cq in [q.send_cq, q.recv_cq].into_iter().filter(|c| *c != 0) {
                let list = self.by_cq.entry((key.host, cq)).or_default();
                if !list.contains(&key) {
                    list.push(key);
                }
            }
        }
        for q in qps {
            if let Some(dest) = q.dest_qpn {
                Self::pair(story, QpKey { host: q.host, qpn: q.qpn }, dest);
            }
        }
    }
}
