//! Both ends of a connection, from the two-host lab (6.12 and 7.3): each guest's daemon captured
//! its kernel with `--clock-peer` the other's, while `ib_send_bw -e` (host 1 serves) and
//! then `rping` (host 1 serves; the client's first attempts came before the server
//! listened) ran across the wire. Checked here against what perftest printed and what the
//! headers measured: the QPs paired, the completions joined to the posts, the clocks
//! placed, a live merge equal to the report's, and the Perfetto export's arrows.

use rdma_trace::capture::{Header, Record};
use rdma_trace::cli::ReadOpts;
use rdma_trace::clock::Placement;
use rdma_trace::cmd::report::{build, read};
use rdma_trace::event::Event;
use rdma_trace::event::FieldId;
use rdma_trace::output::connections::QpReport;
use rdma_trace::output::{perfetto, report};
use rdma_trace::pipeline::correlate::engine::{Engine, Limits};
use rdma_trace::pipeline::correlate::qps::QpRow;
use rdma_trace::pipeline::correlate::story::Story;
use rdma_trace::pipeline::merge::Merge;
use rdma_trace::source::capture::{Reader, open};
use serde_json::Value;
use std::path::PathBuf;

mod common;
use common::trace_events::check_trace_events;

const OPTS: ReadOpts = ReadOpts { strict: true, follow: false };

const KERNELS: [&str; 2] = ["6.12", "7.3"];

fn both(k: &str) -> Vec<PathBuf> {
    vec![
        common::lab_capture(&format!("pair-{k}.host1.jsonl.zst")),
        common::lab_capture(&format!("pair-{k}.host2.jsonl.zst")),
    ]
}

/// The QPNs a perftest printed: (local, remote).
fn printed_qpns(k: &str, host: u8) -> (u32, u32) {
    let out =
        std::fs::read_to_string(common::lab_capture(&format!("pair-{k}.send-bw.host{host}.txt"))).unwrap();
    let qpn = |which: &str| {
        let l = out.lines().find(|l| l.trim_start().starts_with(which)).unwrap();
        let hex = l.split("QPN ").nth(1).and_then(|r| r.split_whitespace().next()).unwrap();
        u32::from_str_radix(hex.trim_start_matches("0x"), 16).unwrap()
    };
    (qpn("local address"), qpn("remote address"))
}

fn records(path: &std::path::Path) -> Vec<Record> {
    Reader::new(open(path).unwrap(), true).map(|r| r.unwrap()).collect()
}

fn header(path: &std::path::Path) -> Header {
    match records(path).into_iter().next() {
        Some(Record::Header(h)) => *h,
        other => panic!("no header first: {other:?}"),
    }
}

fn rows<'a>(qps: &'a [QpReport], host: &str, comm: &str) -> Vec<&'a QpReport> {
    qps.iter().filter(|q| q.hostname == host && q.comm == comm).collect()
}

#[test]
fn send_bw_and_rping_completions_are_joined_to_the_posts_across_the_wire() {
    for k in KERNELS {
        joined(k);
    }
}

fn joined(k: &str) {
    let r = build(&both(k), OPTS).unwrap();
    let (server_qpn, client_qpn) = printed_qpns(k, 1);
    assert_eq!(printed_qpns(k, 2), (client_qpn, server_qpn), "{k}: the two perftests agree");
    let (server, client) =
        (rows(&r.qps, "rdma-lab-1", "ib_send_bw"), rows(&r.qps, "rdma-lab-2", "ib_send_bw"));
    assert_eq!((server.len(), client.len()), (1, 1), "{k}: {:#?}", r.qps);
    let (server, client) = (server[0], client[0]);
    assert_eq!((server.qpn, client.qpn), (server_qpn, client_qpn), "{k}");
    assert_eq!(server.peer.as_ref().map(|p| (p.hostname.as_str(), p.qpn)), Some(("rdma-lab-2", client_qpn)));
    assert_eq!(client.peer.as_ref().map(|p| (p.hostname.as_str(), p.qpn)), Some(("rdma-lab-1", server_qpn)));
    assert_eq!(server.dest_ipv4.as_deref(), Some("10.0.0.2"), "{k}: the GID the server's kernel was told");
    // ib_send_bw -n 200: one ibv_post_send, one doorbell, per send; the server posts none
    // (its receives never enter the kernel on soft-RoCE).
    assert_eq!((client.counts.posts, server.counts.posts), (200, 0), "{k}");
    assert!(server.counts.completions > 0, "{k}");
    assert_eq!(
        server.counts.after_peer_post, server.counts.completions,
        "{k}: every server completion after a client post"
    );
    assert_eq!(
        client.counts.after_own_post, client.counts.completions,
        "{k}: the client's: its sends acknowledged"
    );
    assert!(r.qps.iter().all(|q| q.counts.before_any_post == 0), "{k}: none before a post: {:#?}", r.qps);
    assert!(r.qps.iter().all(|q| q.qpn >= 2), "{k}: QP 0 and 1 are the kernel's: {:#?}", r.qps);

    // rping both ways: the connected QPs name each other and each end's completions follow
    // the other's posts. A client attempt made before the server listened (6.12's run had
    // one) never connected: in the error state, its completions flushed.
    let connected = |h: &str| -> Vec<&QpReport> {
        rows(&r.qps, h, "rping").into_iter().filter(|q| q.peer.is_some()).collect()
    };
    let (a, b) = (connected("rdma-lab-1"), connected("rdma-lab-2"));
    assert_eq!((a.len(), b.len()), (1, 1), "{k}: {:#?}", r.qps);
    assert_eq!(a[0].peer.as_ref().unwrap().qpn, b[0].qpn, "{k}");
    assert!(a[0].counts.after_peer_post > 0 && b[0].counts.after_peer_post > 0, "{k}: {a:?} {b:?}");
    let failed: Vec<_> =
        rows(&r.qps, "rdma-lab-2", "rping").into_iter().filter(|q| q.peer.is_none()).collect();
    assert_eq!(failed.len(), if k == "6.12" { 1 } else { 0 }, "{k}: {:#?}", r.qps);
    for q in failed {
        assert_eq!((q.state.as_deref(), q.counts.flushed), (Some("ERR"), q.counts.completions), "{k}: {q:?}");
    }
}

#[test]
fn the_other_host_is_placed_by_the_clock_its_peer_measured() {
    for k in KERNELS {
        placed(k);
    }
}

fn placed(k: &str) {
    let files = both(k);
    let (h1, h2) = (header(&files[0]), header(&files[1]));
    // Each daemon measured the other: the two agree within their error bars.
    let (of2, of1) = (&h1.clocks[0], &h2.clocks[0]);
    assert_eq!((of2.boot_id.as_str(), of1.boot_id.as_str()), (h2.boot_id.as_str(), h1.boot_id.as_str()));
    let gap = (of2.offset_ns + of1.offset_ns).unsigned_abs();
    assert!(gap <= of2.error_ns() + of1.error_ns(), "{of2:?} against {of1:?}");
    // The report places host 2 by the sample with the shorter round trip.
    let kept = if of2.rtt_ns <= of1.rtt_ns { of2.offset_ns } else { -of1.offset_ns };
    let r = build(&files, OPTS).unwrap();
    let placed = r.captures[1].clock.as_ref().expect("placed by a measurement");
    assert_eq!(placed.offset_ns, kept);
    let text = report::text(&r);
    assert!(text.contains("from rdma-lab-1's (measured by rdma-lab-"), "{text}");
    // Every host-2 event is where its own clock, the two headers and the offset put it.
    let merged = read(&files, OPTS, true).unwrap().events;
    let own: Vec<Event> = records(&files[1])
        .into_iter()
        .filter_map(
            |r| if let Record::Event(e) = r { Some(std::sync::Arc::unwrap_or_clone(e)) } else { None },
        )
        .collect();
    let shift = h2.realtime_offset_ns - h1.realtime_offset_ns - kept;
    let mut theirs = merged.iter().filter(|e| e.host == 1).map(|e| e.ts_ns).collect::<Vec<_>>();
    let mut want = own.iter().map(|e| (e.ts_ns as i64 + shift) as u64).collect::<Vec<_>>();
    theirs.sort_unstable();
    want.sort_unstable();
    assert_eq!(theirs, want);
}

/// Two live streams merged as they arrive (host 2's first, so its records wait for host
/// 1's header) give the events the report places, record for record.
#[test]
fn a_live_merge_places_the_records_as_the_report_does() {
    let files = both("7.3");
    let (one, two) = (records(&files[0]), records(&files[1]));
    let mut merge = Merge::new(2);
    let mut placed = Vec::new();
    let (mut i, mut j) = (0, 0);
    // Host 2 runs ahead by 50 records, then they alternate.
    while i < one.len() || j < two.len() {
        let (src, rec) = if j < two.len() && (j < 50 || i >= one.len() || j <= i + 50) {
            j += 1;
            (1, two[j - 1].clone())
        } else {
            i += 1;
            (0, one[i - 1].clone())
        };
        placed.extend(merge.take(src, rec));
    }
    let mut live: Vec<(u64, u32, Option<u64>)> = placed
        .iter()
        .filter_map(|(_, r)| if let Record::Event(e) = r { Some((e.ts_ns, e.pid, e.seq)) } else { None })
        .collect();
    let mut report: Vec<(u64, u32, Option<u64>)> =
        read(&files, OPTS, true).unwrap().events.iter().map(|e| (e.ts_ns, e.pid, e.seq)).collect();
    live.sort_unstable();
    report.sort_unstable();
    assert_eq!(live.len(), report.len());
    assert_eq!(live, report);
    assert!(merge.settled().is_some(), "both sent stats");
}

#[test]
fn the_perfetto_export_draws_posts_to_the_completions_on_the_other_host() {
    for k in KERNELS {
        arrows(k);
    }
}

fn arrows(k: &str) {
    let r = read(&both(k), OPTS, true).unwrap();
    let hosts: Vec<perfetto::Host> = r
        .headers
        .iter()
        .zip(&r.placed)
        .enumerate()
        .map(|(i, (h, p))| perfetto::Host {
            name: h.as_ref().unwrap().hostname.clone(),
            placed: p.clone(),
            other_boot: i > 0,
        })
        .collect();
    let events = r.events.clone();
    let (story, _, _) = r.engine.finish();
    let doc = perfetto::export(&events, &story, &hosts);
    let wrong = check_trace_events(&doc);
    assert!(wrong.is_empty(), "{} problems, first: {:?}", wrong.len(), &wrong[..wrong.len().min(5)]);
    assert!(doc["otherData"]["clocks"][0]["offset"].as_str().is_some_and(|s| s.contains(" ms ± ")));
    let evs = doc["traceEvents"].as_array().unwrap();
    // Each process is named with its host (`@rdma-lab-2`); that is how a track's host is known.
    let host_of: std::collections::HashMap<u64, u64> = evs
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| {
            let name = e["args"]["name"].as_str().unwrap();
            let h = if name.ends_with("@rdma-lab-1") {
                0
            } else if name.ends_with("@rdma-lab-2") {
                1
            } else {
                9
            };
            (e["pid"].as_u64().unwrap(), h)
        })
        .collect();
    assert!(host_of.values().all(|&h| h < 2), "every process named with its host: {host_of:?}");
    let host = |e: &Value| host_of[&e["pid"].as_u64().unwrap()];
    // Each post's arrow ends on a completion handler in the other host's kernel.
    let mut across = [0, 0];
    for post in evs.iter().filter(|e| e["name"] == "rxe_post_send" && e["flow_out"] == true) {
        let id = &post["bind_id"];
        let done = evs.iter().find(|e| e["bind_id"] == *id && e["flow_in"] == true).expect("its end");
        assert_eq!(done["name"], "comp_handler", "{post} → {done}");
        assert_ne!(host(post), host(done), "{post} → {done}");
        across[host(post) as usize] += 1;
    }
    assert!(across[0] > 0 && across[1] > 0, "arrows from both hosts' posts: {across:?}");
    let names: Vec<&str> = evs
        .iter()
        .filter(|e| e["name"] == "process_name")
        .filter_map(|e| e["args"]["name"].as_str())
        .collect();
    // The first host's pids are its own; another host's are given ids of the export's, and
    // its processes' names say their own pid.
    let theirs = events.iter().find(|e| e.host == 1 && e.comm == "ib_send_bw").unwrap();
    let second = format!("ib_send_bw (pid {}) @rdma-lab-2", theirs.pid);
    assert!(names.contains(&"ib_send_bw @rdma-lab-1") && names.contains(&second.as_str()), "{names:?}");
}

/// `trace --connect A --connect B` (here the two hosts' captures as sources): one stream,
/// every event of both, each line led by its host and showing that host's own pid, on the
/// first host's clock and in its time order; the second's offset said; each trailer's
/// account said.
#[test]
fn trace_connect_shows_both_hosts_as_one_stream() {
    for k in KERNELS {
        let files = both(k);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_rdma-trace"))
            .arg("trace")
            .args(files.iter().flat_map(|f| [std::ffi::OsStr::new("--connect"), f.as_os_str()]))
            .output()
            .unwrap();
        let (text, said) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{said}");
        let h2 = header(&files[1]);
        let clock = &header(&files[0]).clocks[0];
        let offset = rdma_trace::clock::offset_text(clock.offset_ns, clock.error_ns());
        assert!(
            said.contains(&format!("source 2: {} ({}), its clock {offset}", h2.hostname, h2.kernel_release)),
            "{said}"
        );
        for (i, f) in files.iter().enumerate() {
            let h = header(f);
            let events: Vec<Event> = records(f)
                .into_iter()
                .filter_map(|r| {
                    if let Record::Event(e) = r { Some(std::sync::Arc::unwrap_or_clone(e)) } else { None }
                })
                .collect();
            let mine: Vec<&str> =
                text.lines().filter(|l| l.starts_with(&format!("{:<12} ", h.hostname))).collect();
            let shown = mine.iter().filter(|l| !l.contains(" ! ") && !l.contains(" ◆ ")).count();
            assert_eq!(shown, events.len(), "{k} host {}: every event a line of its own", i + 1);
            // Its own pids, never a merged one.
            let first = events.iter().find(|e| e.comm == "ib_send_bw").unwrap();
            assert!(
                mine.iter().any(|l| l.contains(&format!("ib_send_bw[{}/", first.pid))),
                "{k} host {}",
                i + 1
            );
            assert!(said.contains(&format!("{}: the daemon stopped on", f.display())), "{said}");
        }
        // Host 2's events on host 1's clock: its first event's line shows it placed.
        let p = rdma_trace::clock::Placement::of(1, &header(&files[0]), &h2);
        let mut e = records(&files[1])
            .into_iter()
            .find_map(
                |r| if let Record::Event(e) = r { Some(std::sync::Arc::unwrap_or_clone(e)) } else { None },
            )
            .unwrap();
        p.event(&mut e);
        let at = format!("{:<12} {:>14.6} ", h2.hostname, e.ts_ns as f64 / 1e9);
        assert!(text.lines().any(|l| l.starts_with(&at)), "{k}: no line at {at:?}");
        // In time order across the hosts.
        let times: Vec<f64> =
            text.lines().map(|l| l[13..].split_whitespace().next().unwrap().parse().unwrap()).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{k}: lines out of time order");
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_rdma-trace"))
            .args(["trace", "-o", "/dev/null", "--connect"])
            .arg(&files[0])
            .arg("--connect")
            .arg(&files[1])
            .output()
            .unwrap();
        assert!(!o.status.success(), "-o with two sources is refused");
        assert!(String::from_utf8_lossy(&o.stderr).contains("-o and --story take one source"));
    }
}

/// `explain cq A B`: the two hosts' captures merged, the completion explained begins at the
/// post it followed: the QP that posted is the peer (on the other host) of the QP whose CQ
/// completed, or the QP itself for a send completion, as the report pairs them.
#[test]
fn explain_cq_begins_at_the_post_on_the_other_host() {
    for k in KERNELS {
        let files = both(k);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_rdma-trace"))
            .args(["explain", "cq", "--json"])
            .args(&files)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let x: Value = serde_json::from_slice(&out.stdout).unwrap();
        let post = x["stages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["title"].as_str().unwrap().starts_with("The post"));
        let post = post.unwrap_or_else(|| panic!("{k}: no post stage: {x:#}"));
        let qpn = x["values"]["post_qp_num"].as_u64().unwrap();
        assert!(x["values"]["post_to_completion_ns"].as_u64().unwrap() > 0, "{x:#}");
        let r = build(&files, OPTS).unwrap();
        let seen = post["seen"].as_array().unwrap();
        let by = seen[0].as_str().unwrap();
        let at = seen[1].as_str().unwrap();
        // The host of the completion, and of the post (`pid@host`).
        let comp_host = at.split("this completion on ").nth(1).and_then(|r| r.split(' ').next()).unwrap();
        let post_host = by.rsplit('@').next().unwrap().trim_end_matches(']');
        let across = post["title"].as_str().unwrap().contains("peer QP");
        assert_eq!(across, comp_host != post_host, "{k}: {seen:?}");
        let row = r.qps.iter().find(|q| q.hostname == post_host && u64::from(q.qpn) == qpn);
        let row = row.unwrap_or_else(|| panic!("{k}: no QP {qpn:#x} on {post_host} in the report"));
        if across {
            let peer = row.peer.as_ref().expect("a paired QP");
            assert_eq!(
                peer.hostname, comp_host,
                "{k}: the post's QP is paired with one on the completion's host"
            );
        }
        assert!(x["occurrence"].as_str().unwrap().contains(&format!("@{comp_host}")), "{x:#}");
        // Across hosts, the join is said to be as good as the clock: its error bar given.
        let error = r.captures[1].clock.as_ref().unwrap().error_ns;
        if across {
            let bar = rdma_trace::units::duration(error);
            assert!(at.contains(&format!("± {bar}: the measured offset's error bar")), "{k}: {at}");
        }
    }
}

/// The companion's two QPs share their send CQ (host 1 of a 6.12 pair run, where the
/// companion ran beside the pair's workloads): a completion event names the CQ, not the
/// QP, so each is counted once, on the QP whose post came last, and none is "before any
/// post" for the QP that never posted. Counted against the capture's own events: the
/// handler's runs on that CQ.
#[test]
fn a_completion_on_a_shared_cq_counts_once_on_the_qp_that_posted() {
    let file = common::lab_capture("pair-6.12.companion.host1.jsonl.zst");
    let events: Vec<Event> = records(&file)
        .into_iter()
        .filter_map(
            |r| if let Record::Event(e) = r { Some(std::sync::Arc::unwrap_or_clone(e)) } else { None },
        )
        .collect();
    let companion = |e: &&Event| e.comm == "rdma-trace-work";
    let send_cqs: std::collections::BTreeSet<u64> = events
        .iter()
        .filter(companion)
        .filter(|e| e.is(rdma_trace::event::ProbeId::ModifyQp))
        .filter_map(|e| e.field(FieldId::SendCq))
        .collect();
    assert_eq!(send_cqs.len(), 1, "the companion's QPs share one send CQ: {send_cqs:?}");
    let cq = *send_cqs.first().unwrap();
    let handled = events
        .iter()
        .filter(|e| {
            e.is(rdma_trace::event::ProbeId::CompHandler) && e.kind == rdma_trace::event::EventKind::Entry
        })
        .filter(|e| e.field(FieldId::Cq) == Some(cq))
        .count() as u64;
    assert!(handled > 0);
    let r = build(&[file], OPTS).unwrap();
    let rows: Vec<&QpReport> = r.qps.iter().filter(|q| q.comm == "rdma-trace-work").collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(
        rows.iter().map(|q| q.counts.completions).sum::<u64>(),
        handled,
        "each completion counted once: {rows:?}"
    );
    for q in &rows {
        assert_eq!(q.counts.before_any_post, 0, "{q:?}");
        assert_eq!(q.counts.completions, q.counts.after_own_post, "joined to the QP's own posts: {q:?}");
        assert_eq!(q.counts.completions > 0, q.counts.posts > 0, "counted on the QP that posted: {q:?}");
    }
}

/// A stream as a viewer that joined at `cut` gets it from a daemon: the header, the state
/// of the daemon's own story of everything before the cut (in pieces of `rows` rows), and
/// the records from the cut on. Fed as the daemon feeds its story: events, steps, stats.
fn joined_at(recs: &[Record], cut: usize, rows: usize) -> Vec<Record> {
    let mut daemon = Engine::new(Vec::new(), Limits::default());
    for r in &recs[..cut] {
        match r {
            Record::Event(e) => _ = daemon.push(e.clone()),
            Record::Step(s) => daemon.add_steps(vec![s.step.clone()]),
            Record::Stats(s) => daemon.settle(s.ts_ns),
            _ => {}
        }
    }
    let state = daemon.state();
    let mut out = vec![recs[0].clone()];
    out.extend(state.pieces(rows).into_iter().map(Record::State));
    out.extend(recs[cut..].iter().cloned());
    out
}

/// The story a viewer of both streams builds (`tui --connect A --connect B`, as
/// `cmd::tui` feeds it): records placed by the live merge, the two taking turns, states
/// seeding the story, the window settled only as far as both have reached.
fn viewed(one: &[Record], two: &[Record]) -> Story {
    let mut merge = Merge::new(2);
    let mut live = Engine::new(Vec::new(), Limits::default());
    live.settle_only();
    let longest = one.len().max(two.len());
    for k in 0..longest {
        for (src, recs) in [(0, one), (1, two)] {
            let Some(r) = recs.get(k) else { continue };
            for (j, placed) in merge.take(src, r.clone()) {
                match placed {
                    Record::State(st) => live.seed(&st),
                    Record::Event(e) => _ = live.push(e),
                    Record::Step(s) => live.add_steps(vec![s.step]),
                    Record::Trailer(_) => merge.ended(j),
                    _ => {}
                }
            }
            if let Some(t) = merge.settled() {
                live.settle(t);
            }
        }
    }
    live.finish().0
}

fn qp_row(q: &QpRow) -> impl PartialEq + std::fmt::Debug {
    (q.key, q.pid, q.comm.clone(), q.send_cq, q.recv_cq, q.state, q.dest_qpn, q.dgid, q.peer, q.counts)
}

/// Issue 39: a viewer that joins both daemons in the middle of the perftest run (at host 2's
/// 100th post of 200) shows, for every QP, CQ and MR made before it joined, the rows of a
/// viewer that was there from the start: the QPs paired across the wire, their CQs and
/// counts, each CQ's maker, each MR's pages and keys and whether it is still pinned.
#[test]
fn a_viewer_that_joins_mid_run_has_the_rows_of_one_there_from_the_start() {
    // On 7.3 no completion had come by the cut; on 6.12 one had, and its channel is
    // in the state.
    let carried: usize = KERNELS.iter().map(|k| late(k)).sum();
    assert!(carried >= 1, "a CQ's channel carried by the state");
}

/// Checks a viewer that joined mid-run; returns how many CQs' channels the state carried.
fn late(k: &str) -> usize {
    let files = both(k);
    let (one, two) = (records(&files[0]), records(&files[1]));
    let place = Placement::of(1, &header(&files[0]), &header(&files[1]));
    let posts: Vec<u64> = two
        .iter()
        .filter_map(|r| match r {
            Record::Event(e) if e.name == "rxe_post_send" && e.comm == "ib_send_bw" => Some(e.ts_ns),
            _ => None,
        })
        .collect();
    assert!(posts.len() >= 200, "{k}: ib_send_bw -n 200 rang {} doorbells", posts.len());
    let t_cut = place.time(posts[100]);
    let cut_at = |recs: &[Record], time: &dyn Fn(u64) -> u64| {
        recs.iter().position(|r| matches!(r, Record::Event(e) if time(e.ts_ns) > t_cut)).unwrap()
    };
    let (cut1, cut2) = (cut_at(&one, &|t| t), cut_at(&two, &|t| place.time(t)));
    let full = viewed(&one, &two);
    let late1 = joined_at(&one, cut1, 3);
    let late2 = joined_at(&two, cut2, 3);
    let states = late1.iter().chain(&late2).filter(|r| matches!(r, Record::State(_))).count();
    assert!(states > 4, "{k}: the state came in pieces ({states})");
    let late = viewed(&late1, &late2);

    // QPs: every one the daemons told of, the same row (the peer on the other host too).
    let mut compared = 0;
    for (key, row) in &late.qps.rows {
        let whole = full.qps.rows.get(key).unwrap_or_else(|| panic!("{k}: {key:?} only in the late view"));
        assert_eq!(qp_row(row), qp_row(whole), "{k}: {key:?}");
        compared += 1;
    }
    let send_bw: Vec<&QpRow> = late.qps.rows.values().filter(|q| q.comm == "ib_send_bw").collect();
    assert_eq!(send_bw.len(), 2, "{k}: both perftests' QPs made before the join: {send_bw:#?}");
    assert!(send_bw.iter().all(|q| q.peer.is_some_and(|p| p.host != q.key.host)), "{k}: paired across");
    assert!(send_bw.iter().any(|q| q.counts.after_peer_post > 0), "{k}: completions joined to posts");

    // CQs: each with completions in the whole, the same maker, pointer and count.
    for (handle, cq) in &full.cqs {
        let Some(l) = late.cqs.get(handle) else { continue };
        assert_eq!(
            (l.pid, l.kernel, l.host, l.completions, l.channel_fd),
            (cq.pid, cq.kernel, cq.host, cq.completions, cq.channel_fd),
            "{k}: CQ {handle:#x}"
        );
        compared += 1;
    }
    let owned = |s: &Story| s.cqs.values().filter(|c| c.pid.is_some()).count();
    assert_eq!(owned(&late), owned(&full), "{k}: every CQ's maker known");
    // Each CQ's channel: rping's given to ibv_create_cq, ib_send_bw's (ibv_create_cq_ex,
    // not probed) known by the fd ibv_get_cq_event read.
    let channels = |s: &Story| s.cqs.values().filter(|c| c.channel_fd.is_some()).count();
    assert!(channels(&full) >= 2, "{k}: {} CQs with a channel fd", channels(&full));
    assert_eq!(channels(&late), channels(&full), "{k}: every CQ's channel known");

    // What the state alone carries (the records after it tell much of it again): a viewer
    // that has read only the header and the state has each CQ's maker and channel as a
    // viewer of everything before the cut has them.
    let until = |recs: &[Record], to: &[Record]| {
        let mut v: Vec<Record> =
            recs.iter().take_while(|r| matches!(r, Record::Header(_) | Record::State(_))).cloned().collect();
        v.extend(to.last().cloned());
        v
    };
    let seeded = viewed(&until(&late1, &one), &until(&late2, &two));
    let mut before1 = one[..cut1].to_vec();
    let mut before2 = two[..cut2].to_vec();
    before1.extend(one.last().cloned());
    before2.extend(two.last().cloned());
    let before = viewed(&before1, &before2);
    let made = |s: &Story| s.cqs.values().map(|c| (c.handle, c.pid, c.channel_fd)).collect::<Vec<_>>();
    assert_eq!(made(&seeded), made(&before), "{k}: the CQs the state told of");

    // MRs: each the late view knows, as the whole has it at the end.
    for p in late.processes.values() {
        for m in &p.mrs {
            let whole =
                full.processes[&p.pid].mrs.iter().rev().find(|w| (w.addr, w.length) == (m.addr, m.length));
            let whole =
                whole.unwrap_or_else(|| panic!("{k}: MR {:#x} of {} only in the late view", m.addr, p.pid));
            assert_eq!(
                (m.pages, m.lkey, m.rkey, m.live),
                (whole.pages, whole.lkey, whole.rkey, whole.live),
                "{k}: MR {:#x}",
                m.addr
            );
            compared += 1;
        }
    }
    assert!(compared > 10, "{k}: compared {compared} rows");

    // Without the state, the same late streams do not join across the wire: what it adds.
    let bare =
        |recs: Vec<Record>| recs.into_iter().filter(|r| !matches!(r, Record::State(_))).collect::<Vec<_>>();
    let unseeded = viewed(&bare(late1), &bare(late2));
    assert!(
        unseeded.qps.rows.values().filter(|q| q.comm == "ib_send_bw").all(|q| q.peer.is_none()),
        "{k}: a late view with no state pairs nothing"
    );
    channels(&seeded)
}

/// Issue 39, found by the gate on 7.3 (2026-12-05): on host 1, ib_send_bw freed its CQ and
/// the companion's CQ was made at the same kernel address. The TUI found the path of
/// ib_send_bw's CQ by that pointer and named the companion's QP ("its own post,
/// acknowledged, qp 0x16"); the pair test's screen check failed. The path now comes from
/// the QP the CQ's completions were joined through.
#[test]
fn a_cq_whose_address_the_kernel_gave_again_keeps_its_own_path() {
    use rdma_trace::tui::{HostLine, model::Model};
    let files = [
        common::lab_capture("pair-7.3-reused-cq.host1.jsonl.zst"),
        common::lab_capture("pair-7.3-reused-cq.host2.jsonl.zst"),
    ];
    let (one, two) = (records(&files[0]), records(&files[1]));
    let mut merge = Merge::new(2);
    let mut live = Engine::new(Vec::new(), Limits::default());
    live.settle_only();
    let mut model = Model::new("two hosts".into());
    model.hosts = vec![HostLine::default(), HostLine::default()];
    for k in 0..one.len().max(two.len()) {
        for (src, recs) in [(0, &one), (1, &two)] {
            let Some(r) = recs.get(k) else { continue };
            for (j, placed) in merge.take(src, r.clone()) {
                match placed {
                    Record::Header(h) => model.host(j, &h, merge.placements[j].as_ref()),
                    Record::State(st) => live.seed(&st),
                    Record::Event(e) => _ = live.push(e),
                    Record::Step(s) => live.add_steps(vec![s.step]),
                    _ => {}
                }
            }
        }
    }
    live.flush();
    model.rows_from(&live);
    // The reuse is real: the companion's QP on host 1 sends on a CQ at the pointer
    // ib_send_bw's receive CQ had.
    let send_bw = model
        .cqs
        .values()
        .find(|r| r.comm == "ib_send_bw" && r.cq.host == 0 && r.cq.completions > 100)
        .expect("host 1's ib_send_bw CQ");
    let reused = live
        .now()
        .qps
        .rows
        .values()
        .any(|q| q.comm.starts_with("rdma-trace-wor") && q.send_cq == send_bw.cq.kernel);
    assert!(reused, "the companion's CQ took the address");
    let hop = send_bw.post.as_ref().expect("a path");
    assert!(hop.across, "{}", hop.from);
    assert_eq!(hop.from, "qp 0x14 @rdma-lab-2", "the QP its completions followed, on the other host");
}
