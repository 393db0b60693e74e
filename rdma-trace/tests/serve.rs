//! The daemon's broadcaster on real lab events (the daemon itself runs in the lab): two
//! subscribers, one joining late, get identical records after the late one's join point,
//! the late one first the state of what is pinned and mapped; a subscriber that stops
//! reading loses records and is told how many, while the other loses nothing.

use rdma_trace::capture::{Header, Record};
use rdma_trace::event::Event;
use rdma_trace::serve::{Broadcaster, Hello, Joining, Want};
use rdma_trace::sink::Sink;
use rdma_trace::source::capture::Reader;
use rdma_trace::source::capture::parse_jsonl;
use std::io::Read;
use std::os::unix::net::UnixStream;
use std::path::Path;

fn lab_events(name: &str) -> Vec<Event> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab").join(name);
    parse_jsonl(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn header() -> Header {
    Header {
        tool: "test".into(),
        hostname: "lab".into(),
        kernel_release: "7.3.4+deb13-amd64".into(),
        boot_id: String::new(),
        realtime_offset_ns: 0,
        command_line: vec![],
        ring_bytes: 0,
        return_instances: 0,
        probes: vec![],
        libibverbs: None,
        redacted: false,
        ..Default::default()
    }
}

fn trailer() -> rdma_trace::capture::Trailer {
    rdma_trace::capture::Trailer {
        ts_ns: 0,
        stopped: "SIGTERM".into(),
        exit_code: 0,
        delivered: 0,
        lost: 0,
        sites: vec![],
        ..Default::default()
    }
}

/// A subscriber: the daemon's end goes to the broadcaster, ours is read on a thread.
fn subscribe(tx: &std::sync::mpsc::Sender<Joining>, name: &str) -> std::thread::JoinHandle<Vec<u8>> {
    subscribe_with_uid(tx, name, 0)
}

/// As `subscribe`, a subscriber of uid `uid` (SO_PEERCRED's, on a real socket).
fn subscribe_with_uid(
    tx: &std::sync::mpsc::Sender<Joining>,
    name: &str,
    uid: u32,
) -> std::thread::JoinHandle<Vec<u8>> {
    subscribe_wanting(tx, name, uid, Want::Both)
}

/// A subscriber that asked for events only (no state, no reading of the kernel).
fn subscribe_events(tx: &std::sync::mpsc::Sender<Joining>, name: &str) -> std::thread::JoinHandle<Vec<u8>> {
    subscribe_wanting(tx, name, 0, Want::Events)
}

fn subscribe_wanting(
    tx: &std::sync::mpsc::Sender<Joining>,
    name: &str,
    uid: u32,
    want: Want,
) -> std::thread::JoinHandle<Vec<u8>> {
    let (ours, theirs) = UnixStream::pair().unwrap();
    tx.send(Joining { out: Box::new(theirs), hello: Hello::new(want), peer: name.into(), uid }).unwrap();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        (&ours).read_to_end(&mut buf).unwrap();
        buf
    })
}

fn records(bytes: &[u8]) -> Vec<Record> {
    let mut r = Reader::new(bytes, true);
    let out: Vec<Record> = r.by_ref().map(|x| x.unwrap()).collect();
    assert_eq!((r.report.seq_gaps, r.report.cut_short), (0, false), "{:?}", r.report);
    out
}

#[test]
fn a_late_subscriber_gets_the_state_then_the_same_records() {
    let events = lab_events("companion-7.3.jsonl");
    let (tx, rx) = std::sync::mpsc::channel();
    let mut b = Broadcaster::new(header(), rx);
    let early = subscribe(&tx, "early");
    b.tick().unwrap();
    // Joins in the data phase: MRs are pinned and the queues mapped by then.
    let half = events.iter().position(|e| e.name == "comp_handler").expect("a completion");
    for e in &events[..half] {
        b.event(&std::sync::Arc::new(e.clone())).unwrap();
    }
    let late = subscribe(&tx, "late");
    b.tick().unwrap();
    for e in &events[half..] {
        b.event(&std::sync::Arc::new(e.clone())).unwrap();
    }
    b.trailer(&trailer()).unwrap();
    b.close();
    let (early, late) = (records(&early.join().unwrap()), records(&late.join().unwrap()));
    assert!(matches!(early[0], Record::Header(_)) && matches!(late[0], Record::Header(_)));
    let Record::State(st) = &late[1] else { panic!("the late one's state: {:?}", late[1]) };
    let joined_at = late[2].seq().unwrap();
    // What the first half pinned and mapped is in the state.
    let pinned_before: u64 = st.processes.iter().map(|p| p.pinned_bytes).sum();
    assert!(pinned_before > 0 && st.processes.iter().any(|p| !p.mappings.is_empty()), "{st:?}");
    let after = |rs: &[Record]| -> Vec<Record> {
        rs.iter()
            .filter(|r| !matches!(r, Record::Header(_) | Record::State(_)))
            .filter(|r| r.seq().unwrap() >= joined_at)
            .cloned()
            .collect()
    };
    assert_eq!(after(&early), after(&late[2..]), "the same records after the join point");
    assert_eq!(after(&late[2..]).len(), events.len() - half + 1, "every later event and the trailer");
    assert_eq!(early.len(), 2 + events.len() + 1);
}

#[test]
fn a_subscriber_that_stops_reading_is_told_what_it_lost_and_costs_the_other_nothing() {
    let events = lab_events("session-7.3.jsonl");
    let (tx, rx) = std::sync::mpsc::channel();
    let mut b = Broadcaster::new(header(), rx);
    let reader = subscribe(&tx, "reader");
    // The stalled one: nobody reads its socket until the end.
    let (stalled_ours, theirs) = UnixStream::pair().unwrap();
    tx.send(Joining {
        out: Box::new(theirs),
        hello: Hello::new(Want::Events),
        peer: "stalled".into(),
        uid: 0,
    })
    .unwrap();
    b.tick().unwrap();
    let rounds = 2 * rdma_trace::serve::QUEUE / events.len() + 2;
    let t0 = std::time::Instant::now();
    for _ in 0..rounds {
        for e in &events {
            b.event(&std::sync::Arc::new(e.clone())).unwrap();
        }
    }
    let took = t0.elapsed();
    // Now it reads: the loss record comes where it resumed.
    let stalled = std::thread::spawn(move || {
        let mut buf = Vec::new();
        (&stalled_ours).read_to_end(&mut buf).unwrap();
        buf
    });
    for e in &events {
        b.event(&std::sync::Arc::new(e.clone())).unwrap();
    }
    b.trailer(&trailer()).unwrap();
    b.close();
    let fed = (rounds + 1) * events.len();
    let all = records(&reader.join().unwrap());
    assert_eq!(all.iter().filter(|r| matches!(r, Record::Event(_))).count(), fed, "the reader lost nothing");
    let bytes = stalled.join().unwrap();
    let mut r = Reader::new(&bytes[..], true);
    let got: Vec<Record> = r.by_ref().map(|x| x.unwrap()).collect();
    let got_events = got.iter().filter(|r| matches!(r, Record::Event(_))).count();
    let told: u64 = got
        .iter()
        .filter_map(|r| match r {
            Record::Loss(l) if l.site == rdma_trace::capture::LossSite::Subscriber => Some(l.count),
            _ => None,
        })
        .sum();
    assert!(told > 0, "the stalled one was told");
    assert_eq!(got_events as u64 + told, fed as u64, "what it got and what it was told add up");
    assert!(took < std::time::Duration::from_secs(30), "the daemon did not wait for it: {took:?}");
}

/// Issue 39/41: a process with 100 000 MRs (a storage or KV-cache engine) when a viewer
/// joins: its state comes as records that each fit the reader's line limit, read strictly
/// with no gap, and a story seeded from them has every MR pinned.
#[test]
fn a_state_of_100_000_mrs_reaches_a_late_subscriber_whole() {
    use rdma_trace::capture::{PinnedRange, ProcessState};
    let (tx, rx) = std::sync::mpsc::channel();
    let mrs: Vec<PinnedRange> = (0..100_000u64)
        .map(|i| PinnedRange {
            addr: 0x7f00_0000_0000 + (i << 16),
            length: 65_536,
            charged: 65_536,
            mr_id: Some(i as u32 + 1),
            lkey: Some(i),
            rkey: Some(i),
            ..Default::default()
        })
        .collect();
    let engine = ProcessState {
        pid: 4242,
        comm: "kvcache".into(),
        pinned_bytes: 100_000 * 65_536,
        mrs,
        ..Default::default()
    };
    let mut b = Broadcaster::new(header(), rx).seeded_by(Box::new(move || Ok(vec![engine.clone()])));
    let late = subscribe(&tx, "late");
    b.tick().unwrap();
    b.trailer(&trailer()).unwrap();
    b.close();
    let bytes = late.join().unwrap();
    let longest = bytes.split(|c| *c == b'\n').map(<[u8]>::len).max().unwrap();
    assert!(longest < rdma_trace::source::capture::MAX_LINE / 4, "a line of {longest} bytes");
    let recs = records(&bytes);
    let states: Vec<&rdma_trace::capture::State> =
        recs.iter().filter_map(|r| if let Record::State(s) = r { Some(s) } else { None }).collect();
    assert!(states.len() >= 100, "in pieces: {}", states.len());
    let mut live = rdma_trace::pipeline::correlate::engine::Engine::new(Vec::new(), Default::default());
    for st in &states {
        live.seed(st);
    }
    let ps = &live.now().processes[&rdma_trace::event::Task::new(0, 4242)];
    assert_eq!((ps.comm.as_str(), ps.mrs_live, ps.pinned_bytes), ("kvcache", 100_000, 100_000 * 65_536));
}

/// Issue 41: a subscriber that never reads again cannot hold the end of the run: with its
/// queue full and its socket's buffer too, `close` (SIGTERM, `--duration`) returns within
/// `CLOSE_WAIT`, names it as cut off, and the reading one still has every record.
#[test]
fn a_subscriber_that_never_reads_cannot_hold_the_daemon_at_its_end() {
    let events = lab_events("session-7.3.jsonl");
    let (tx, rx) = std::sync::mpsc::channel();
    let mut b = Broadcaster::new(header(), rx);
    let reader = subscribe(&tx, "reader");
    let (_never_read, theirs) = UnixStream::pair().unwrap();
    tx.send(Joining {
        out: Box::new(theirs),
        hello: Hello::new(Want::Events),
        peer: "stalled".into(),
        uid: 0,
    })
    .unwrap();
    b.tick().unwrap();
    // More than its queue and its socket's buffer hold.
    let rounds = rdma_trace::serve::QUEUE / events.len() + 4;
    for _ in 0..rounds {
        for e in &events {
            b.event(&std::sync::Arc::new(e.clone())).unwrap();
        }
    }
    b.trailer(&trailer()).unwrap();
    let t0 = std::time::Instant::now();
    let cut = b.close();
    let took = t0.elapsed();
    assert!(took < rdma_trace::serve::CLOSE_WAIT + std::time::Duration::from_secs(1), "close took {took:?}");
    assert_eq!(cut, vec!["stalled".to_string()], "the one that never read is named");
    let all = records(&reader.join().unwrap());
    assert_eq!(all.iter().filter(|r| matches!(r, Record::Event(_))).count(), rounds * events.len());
    assert!(matches!(all.last(), Some(Record::Trailer(_))), "the reader got the trailer");
}

/// The socket faces users the daemon does not trust: a hello without a newline is read no
/// further than `MAX_HELLO` bytes and refused in one line; past `MAX_GREETING_PER_UID`
/// connections of one user that say nothing, its next is told the daemon is busy; once
/// those go, a real subscriber is greeted and joins.
#[test]
fn the_socket_bounds_what_a_peer_can_make_it_hold() {
    use rdma_trace::serve::socket::{Listener, MAX_GREETING_PER_UID, MAX_HELLO};
    use std::io::{BufRead, BufReader, Write};
    let dir = std::env::temp_dir().join(format!("rdma-trace-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("d.sock");
    let (joins, joined) = std::sync::mpsc::channel();
    let (notes, _noted) = std::sync::mpsc::channel();
    Listener::bind(&path, &[]).unwrap().serve(joins, notes);
    let answer = |s: &UnixStream| {
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).unwrap();
        line
    };
    // Megabytes without a newline: the daemon stops reading at MAX_HELLO and says why.
    let mut flood = UnixStream::connect(&path).unwrap();
    let chunk = vec![b'x'; 64 << 10];
    let mut sent = 0u64;
    while sent < 4 << 20 && flood.write_all(&chunk).is_ok() {
        sent += chunk.len() as u64;
    }
    let line = answer(&flood);
    assert!(line.contains(&format!("no hello line within {MAX_HELLO} bytes")), "{line}");
    assert!(sent < 4 << 20, "the daemon closed before taking all {sent} bytes");
    // Its greeting ends (the daemon closes it after draining a little): its slot is free
    // before the silent ones come (else one of them is refused, and `busy` takes its slot).
    std::io::Read::read_to_end(&mut flood, &mut Vec::new()).ok(); // (a reset is an end too)
    std::thread::sleep(std::time::Duration::from_millis(300));
    // Silent connections fill the greeting slots; the next is refused at once.
    let silent: Vec<UnixStream> =
        (0..MAX_GREETING_PER_UID).map(|_| UnixStream::connect(&path).unwrap()).collect();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let busy = UnixStream::connect(&path).unwrap();
    let line = answer(&busy);
    assert!(line.contains("busy"), "{line}");
    drop(silent);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let mut ok = UnixStream::connect(&path).unwrap();
    writeln!(ok, "{}", serde_json::to_string(&Hello::new(Want::Both)).unwrap()).unwrap();
    let j = joined.recv_timeout(std::time::Duration::from_secs(5)).expect("a real subscriber joins");
    assert_eq!(j.hello, Hello::new(Want::Both));
    std::fs::remove_dir_all(&dir).ok();
}

/// The kernel addresses in a stream's events and state (values in the kernel half).
fn kernel_values(recs: &[Record]) -> Vec<u64> {
    use rdma_trace::event::Value;
    let kernel = |v: u64| v >= rdma_trace::pipeline::redact::KERNEL_HALF;
    let mut out = Vec::new();
    for r in recs {
        match r {
            Record::Event(e) => out.extend(e.fields.iter().filter_map(|(k, v)| match v {
                Value::U(n)
                    if kernel(n)
                        && !k.starts_with("memlock")
                        && rdma_trace::pipeline::render::err_ptr(n).is_none() =>
                {
                    Some(n)
                }
                _ => None,
            })),
            Record::State(st) => {
                out.extend(st.qps.iter().flat_map(|q| [q.send_cq, q.recv_cq]).filter(|v| kernel(*v)));
                out.extend(st.cqs.iter().map(|c| c.kernel).filter(|v| kernel(*v)));
            }
            _ => {}
        }
    }
    out
}

/// Issue 41: a subscriber that is not root gets kernel addresses as stand-ins (as
/// `--redact` makes them: one per value, so the story's joins hold), in its events and in
/// the state; root gets them as they are, and so does every uid when the daemon reveals
/// them. The records are the same, numbered alike.
#[test]
fn a_subscriber_that_is_not_root_gets_stand_ins_for_kernel_addresses() {
    use rdma_trace::pipeline::redact::KERNEL_STAND_IN;
    let events = lab_events("companion-7.3.jsonl");
    let half = events.iter().position(|e| e.name == "comp_handler").expect("a completion");
    for reveal in [false, true] {
        let (tx, rx) = std::sync::mpsc::channel();
        let mut b = Broadcaster::new(header(), rx).revealing(reveal);
        for e in &events[..half] {
            b.event(&std::sync::Arc::new(e.clone())).unwrap();
        }
        let (root, user) = (subscribe_with_uid(&tx, "root", 0), subscribe_with_uid(&tx, "uid 1001", 1001));
        b.tick().unwrap();
        for e in &events[half..] {
            b.event(&std::sync::Arc::new(e.clone())).unwrap();
        }
        b.trailer(&trailer()).unwrap();
        b.close();
        let (root, user) = (records(&root.join().unwrap()), records(&user.join().unwrap()));
        assert_eq!(root.len(), user.len(), "reveal {reveal}");
        assert_eq!(
            root.iter().map(Record::seq).collect::<Vec<_>>(),
            user.iter().map(Record::seq).collect::<Vec<_>>(),
            "numbered alike"
        );
        let raw = kernel_values(&root);
        assert!(raw.iter().any(|v| *v < KERNEL_STAND_IN), "root sees kernel pointers");
        let theirs = kernel_values(&user);
        let Record::Header(h) = &user[0] else { panic!("a header first") };
        if reveal {
            assert_eq!(theirs, raw, "revealed: as they are");
            assert!(!h.redacted);
        } else {
            assert!(h.redacted, "its header says so");
            assert!(!theirs.is_empty() && theirs.iter().all(|v| *v > KERNEL_STAND_IN), "{theirs:x?}");
            // One stand-in per value: the joins hold (the same CQs, the same owners).
            let distinct = |v: &[u64]| v.iter().collect::<std::collections::BTreeSet<_>>().len();
            assert_eq!(distinct(&theirs), distinct(&raw));
        }
    }
}

/// A seed that reads "the kernel" only when the test lets it, and counts its readings.
fn gated_seed(
    pid: u32,
) -> (rdma_trace::serve::Seed, std::sync::mpsc::Sender<()>, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use rdma_trace::capture::{PinnedRange, ProcessState};
    let (go, gate) = std::sync::mpsc::channel::<()>();
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let c = calls.clone();
    let seed: rdma_trace::serve::Seed = Box::new(move || {
        gate.recv().map_err(|_| rdma_trace::capture::SeedError::ThreadEnded)?;
        c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mr = PinnedRange { length: 65_536, charged: 65_536, mr_id: Some(9), ..Default::default() };
        Ok(vec![ProcessState {
            pid,
            comm: "before".into(),
            pinned_bytes: 65_536,
            mrs: vec![mr],
            seeded: true,
            ..Default::default()
        }])
    });
    (seed, go, calls)
}

/// Polls `tick` until `n` subscribers are joined (5 s at most).
fn tick_until_joined(b: &mut Broadcaster, n: usize) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while b.subscribers() < n {
        assert!(std::time::Instant::now() < until, "{} of {n} joined in 5 s", b.subscribers());
        b.tick().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Issue 41: reading the kernel's tables for a late joiner (`rdma res`, /proc) happens off
/// the thread that drains the ring: while it runs, records keep flowing; joiners that
/// arrived together share one reading and join at one record; a joiner after that gets a
/// reading of its own.
#[test]
fn the_kernel_is_read_for_joiners_off_the_records_path_and_once_for_those_together() {
    let events = lab_events("companion-7.3.jsonl");
    let (seed, go, calls) = gated_seed(4242);
    let (tx, rx) = std::sync::mpsc::channel();
    let mut b = Broadcaster::new(header(), rx).seeded_by(seed);
    let (one, two) = (subscribe(&tx, "one"), subscribe(&tx, "two"));
    b.tick().unwrap();
    // The data phase: MRs are pinned and the queues mapped by then.
    let half = events.iter().position(|e| e.name == "comp_handler").expect("a completion");
    for (k, e) in events[..half].iter().enumerate() {
        b.event(&std::sync::Arc::new(e.clone())).unwrap();
        if k % 50 == 0 {
            b.tick().unwrap();
        }
    }
    assert_eq!(b.subscribers(), 0, "still waiting for the kernel's tables, while records went on");
    go.send(()).unwrap();
    tick_until_joined(&mut b, 2);
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1, "one reading for both");
    for e in &events[half..] {
        b.event(&std::sync::Arc::new(e.clone())).unwrap();
    }
    let three = subscribe(&tx, "three");
    b.tick().unwrap();
    go.send(()).unwrap();
    tick_until_joined(&mut b, 3);
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2, "a reading of its own");
    b.trailer(&trailer()).unwrap();
    b.close();
    let [one, two, three] = [one, two, three].map(|h| records(&h.join().unwrap()));
    // The reading went into the story first, as a shared record (half + 2, to subscribers
    // already there: none); the two joined at the record after it.
    for (name, recs, at) in [("one", &one, half as u64 + 3), ("two", &two, half as u64 + 3)] {
        let Record::State(st) = &recs[1] else { panic!("{name}: {:?}", recs[1]) };
        assert_eq!(recs[2].seq(), Some(at), "{name} joined where the reading came back");
        let before = st.processes.iter().find(|p| p.pid == 4242).expect("the kernel's process");
        assert!(before.seeded && before.mrs.len() == 1, "{before:?}");
        assert!(st.processes.iter().any(|p| p.pid != 4242 && p.pinned_bytes > 0), "and the events' own");
    }
    assert_eq!(one[2..], two[2..], "the same records from the same point");
    let Record::State(st) = &three[1] else { panic!("three: {:?}", three[1]) };
    assert!(st.processes.iter().any(|p| p.pid == 4242 && p.seeded));
    assert_eq!(three[2].seq(), Some(events.len() as u64 + 3), "three joined at the trailer");
}

/// Issue 41: a reading of the kernel that never comes back holds a joiner `SEED_WAIT` at
/// most; it is joined with what the events showed, and the operator is told.
#[test]
fn a_joiner_is_not_held_past_seed_wait_by_a_reading_that_hangs() {
    use rdma_trace::serve::ServeNotice;
    let events = lab_events("companion-7.3.jsonl");
    let (seed, _never, _) = gated_seed(4242);
    let (tx, rx) = std::sync::mpsc::channel();
    let mut b = Broadcaster::new(header(), rx).seeded_by(seed);
    for e in &events {
        b.event(&std::sync::Arc::new(e.clone())).unwrap();
    }
    let asked = std::time::Instant::now();
    let late = subscribe(&tx, "late");
    b.tick().unwrap();
    tick_until_joined(&mut b, 1);
    let waited = asked.elapsed();
    assert!(waited >= rdma_trace::serve::SEED_WAIT, "joined after {waited:?}");
    assert!(waited < rdma_trace::serve::SEED_WAIT * 2, "joined after {waited:?}");
    let told = b
        .notices()
        .into_iter()
        .any(|n| matches!(&n, ServeNotice::NotSeeded(w) if w.contains("not read within 2.0 s")));
    assert!(told, "the operator is told");
    b.trailer(&trailer()).unwrap();
    b.close();
    let recs = records(&late.join().unwrap());
    let Record::State(st) = &recs[1] else { panic!("{:?}", recs[1]) };
    assert!(
        st.processes.iter().all(|p| p.pid != 4242) && st.processes.iter().any(|p| p.completions > 0),
        "{st:?}"
    );
}

/// Issue 41: a reading that comes back after its joiner stopped waiting (100 000 MRs took
/// longer than `SEED_WAIT` in the lab) is not lost: what it adds goes into the daemon's
/// story and, as a `state` record of the shared stream, to every subscriber, the one that
/// joined without it and one that joined before alike; a later joiner's state has it.
#[test]
fn a_reading_after_its_joiner_stopped_waiting_reaches_everyone() {
    let events = lab_events("companion-7.3.jsonl");
    let (seed, go, calls) = gated_seed(4242);
    let (tx, rx) = std::sync::mpsc::channel();
    let mut b = Broadcaster::new(header(), rx).seeded_by(seed);
    let early = subscribe_events(&tx, "early");
    tick_until_joined(&mut b, 1);
    for e in &events {
        b.event(&std::sync::Arc::new(e.clone())).unwrap();
    }
    let late = subscribe(&tx, "late");
    b.tick().unwrap();
    tick_until_joined(&mut b, 2);
    let at = b.subscribers();
    go.send(()).unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while b.taken_in().is_empty() {
        assert!(std::time::Instant::now() < until, "the reading was not taken in within 5 s");
        b.tick().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!((at, calls.load(std::sync::atomic::Ordering::SeqCst)), (2, 1));
    let third = subscribe(&tx, "third");
    b.tick().unwrap();
    go.send(()).unwrap();
    tick_until_joined(&mut b, 3);
    b.trailer(&trailer()).unwrap();
    b.close();
    let [early, late, third] = [early, late, third].map(|h| records(&h.join().unwrap()));
    let added = |recs: &[Record]| -> Vec<(u64, u32, usize, bool)> {
        recs.iter()
            .skip(2)
            .filter_map(|r| if let Record::State(st) = r { Some(st) } else { None })
            .flat_map(|st| st.processes.iter().map(move |p| (st.seq, p.pid, p.mrs.len(), p.seeded)))
            .collect()
    };
    let Record::State(joined) = &late[1] else { panic!("{:?}", late[1]) };
    assert!(joined.processes.iter().all(|p| p.pid != 4242), "joined before the reading came: {joined:?}");
    assert_eq!(added(&late).len(), 1, "then what the tables added: {:?}", added(&late));
    let (_, pid, mrs, seeded) = added(&late)[0];
    assert_eq!((pid, mrs, seeded), (4242, 1, true));
    assert_eq!(added(&early), added(&late), "the one that joined before got the same record");
    let Record::State(st) = &third[1] else { panic!("{:?}", third[1]) };
    assert!(st.processes.iter().any(|p| p.pid == 4242 && p.mrs.len() == 1), "a later joiner has it: {st:?}");
    assert!(added(&third).is_empty(), "and nothing twice: {:?}", added(&third));
}

/// Issue 41 (long uptime): a process the tracer found gone leaves the state a later joiner
/// gets, with its QPs and CQs, once the story has joined its last events; a joiner before
/// that still sees it. A daemon up for days sends what exists, not everyone it ever saw.
/// Its metrics stay for Prometheus's lookback, so a scrape after its end has its counts.
#[test]
fn a_process_gone_leaves_the_state_later_joiners_get() {
    use rdma_trace::capture::Stats;
    let events = lab_events("companion-7.3.jsonl");
    let (tx, rx) = std::sync::mpsc::channel();
    let metrics = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let mut b = Broadcaster::new(header(), rx).with_metrics(metrics.clone());
    for e in &events {
        b.event(&std::sync::Arc::new(e.clone())).unwrap();
    }
    let end = events.iter().map(|e| e.ts_ns).max().unwrap();
    let worker = events.iter().find(|e| e.comm == "rdma-trace-work").expect("the companion").pid;
    b.processes_gone(&[worker], end + 1).unwrap();
    let before = subscribe(&tx, "before");
    b.tick().unwrap();
    // The next stats record settles the story past the moment it was found gone.
    b.stats(&Stats { ts_ns: end + 2_000_000_000, ..Default::default() }).unwrap();
    let after = subscribe(&tx, "after");
    b.tick().unwrap();
    // Its series stay for a scrape after its end (the lookback), then go.
    let series = format!("pid=\"{worker}\"");
    assert!(metrics.lock().unwrap().contains(&series), "{}", metrics.lock().unwrap());
    let later = end + rdma_trace::pipeline::correlate::engine::ENDED_KEPT_NS + 4_000_000_000;
    b.stats(&Stats { ts_ns: later, ..Default::default() }).unwrap();
    assert!(!metrics.lock().unwrap().contains(&series), "{}", metrics.lock().unwrap());
    b.trailer(&trailer()).unwrap();
    b.close();
    let state = |h: std::thread::JoinHandle<Vec<u8>>| match records(&h.join().unwrap()).swap_remove(1) {
        Record::State(s) => s,
        r => panic!("{r:?}"),
    };
    let (before, after) = (state(before), state(after));
    assert!(before.processes.iter().any(|p| p.pid == worker && p.completions > 0), "{before:?}");
    assert!(before.cqs.iter().any(|c| c.pid == Some(worker)));
    assert!(after.processes.iter().all(|p| p.pid != worker), "{after:?}");
    assert!(after.cqs.iter().all(|c| c.pid != Some(worker)), "{:?}", after.cqs);
    assert!(after.qps.iter().all(|q| q.pid != worker), "{:?}", after.qps);
}

/// Issue 41 (pid reuse): a process found gone is forgotten before the first event after
/// that moment is joined, so a new process given its pid starts a row of its own, whatever
/// the reorder window held; the old one's final row is kept once for the metrics.
#[test]
fn a_new_process_with_a_gone_ones_pid_starts_its_own_row() {
    use rdma_trace::pipeline::correlate::engine::Engine;
    let events = lab_events("companion-7.3.jsonl");
    let worker = events.iter().find(|e| e.comm == "rdma-trace-work").expect("the companion").pid;
    let end = events.iter().map(|e| e.ts_ns).max().unwrap();
    let (first, last) = (events.iter().map(|e| e.ts_ns).min().unwrap(), end);
    let again: Vec<Event> =
        events.iter().map(|e| Event { ts_ns: e.ts_ns - first + last + 5_000_000, ..e.clone() }).collect();
    let mut both = Engine::new(Vec::new(), Default::default());
    for e in &events {
        both.push(e.clone());
    }
    both.retire(rdma_trace::event::Task::new(0, worker), end + 1);
    for e in &again {
        both.push(e.clone());
    }
    both.flush();
    let mut alone = Engine::new(Vec::new(), Default::default());
    for e in &again {
        alone.push(e.clone());
    }
    alone.flush();
    let (b, a) = (
        &both.processes()[&rdma_trace::event::Task::new(0, worker)],
        &alone.processes()[&rdma_trace::event::Task::new(0, worker)],
    );
    assert_eq!(
        (b.event_count, b.completions_total, b.pins_total, b.mappings_total),
        (a.event_count, a.completions_total, a.pins_total, a.mappings_total)
    );
    assert_eq!(both.ended().count(), 0, "the new process's row hides the old one's");
    both.retire(rdma_trace::event::Task::new(0, worker), again.iter().map(|e| e.ts_ns).max().unwrap());
    both.flush();
    let ended: Vec<_> = both.ended().collect();
    assert_eq!(ended.len(), 1, "one row per pid: the newest");
    assert_eq!(ended[0].event_count, a.event_count);
}
