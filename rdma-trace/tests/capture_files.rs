//! Capture files on disk, with real lab events: zstd written and read back (recognised by
//! content, cut mid-frame by a kill), size rotation (each file whole, the sequence running
//! on across files, only the newest kept), and following a file still being written.

use rdma_trace::capture::{Record, SiteCount, Stats, Trailer};
use rdma_trace::event::Event;
use rdma_trace::output::jsonl::Jsonl;
use rdma_trace::output::target::{Rotation, rotated_name};
use rdma_trace::sink::Sink;
use rdma_trace::source::capture::{ReadReport, Reader, open};
use std::path::{Path, PathBuf};

mod common;

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rt-files-{name}-{}", std::process::id()));
    std::fs::remove_dir_all(&d).ok();
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn stats(ts_ns: u64, delivered: u64) -> Stats {
    let site = SiteCount { site: "umem_get".into(), hits: delivered, delivered, ..Default::default() };
    Stats { ts_ns, sites: vec![site], ..Default::default() }
}

fn trailer(delivered: u64) -> Trailer {
    Trailer {
        ts_ns: 1,
        stopped: "SIGINT".into(),
        exit_code: 0,
        delivered,
        lost: 0,
        sites: vec![],
        ..Default::default()
    }
}

fn read(path: &Path) -> (Vec<Record>, ReadReport) {
    let mut r = Reader::new(open(path).unwrap(), false);
    let recs = r.by_ref().map(|x| x.unwrap()).collect();
    (recs, r.report)
}

fn events_of(recs: &[Record]) -> Vec<Event> {
    recs.iter()
        .filter_map(|r| match r {
            Record::Event(e) => Some(Event { seq: None, v: 0, ..(**e).clone() }),
            _ => None,
        })
        .collect()
}

#[test]
fn zstd_captures_read_back_whatever_their_name() {
    let dir = temp("zstd");
    let events = common::lab_events("memlock-7.3.jsonl");
    let path = dir.join("run.jsonl.zst");
    let mut w = Jsonl::create(&path, None).unwrap();
    w.header(&common::test_header()).unwrap();
    for e in &events {
        w.event(&std::sync::Arc::new(e.clone())).unwrap();
    }
    w.trailer(&trailer(events.len() as u64)).unwrap();
    drop(w);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[..4], &[0x28, 0xb5, 0x2f, 0xfd], "zstd by name");
    // Renamed: still recognised by content.
    let renamed = dir.join("run.jsonl");
    std::fs::rename(&path, &renamed).unwrap();
    let (recs, report) = read(&renamed);
    assert_eq!((report.damaged, report.cut_short, report.seq_gaps), (0, false, 0), "{report:?}");
    assert_eq!(events_of(&recs), events);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_killed_zstd_capture_reads_up_to_its_last_flush() {
    let dir = temp("zstd-cut");
    let events = common::lab_events("memlock-7.3.jsonl");
    let path = dir.join("run.jsonl.zst");
    let mut w = Jsonl::create(&path, None).unwrap();
    w.header(&common::test_header()).unwrap();
    let half = events.len() / 2;
    for e in &events[..half] {
        w.event(&std::sync::Arc::new(e.clone())).unwrap();
    }
    w.tick().unwrap(); // the 100 ms flush
    for e in &events[half..] {
        w.event(&std::sync::Arc::new(e.clone())).unwrap();
    }
    // SIGKILL: nothing after the flush reaches the file, and no frame end is written.
    std::mem::forget(w);
    let (recs, report) = read(&path);
    assert!(report.cut_short, "{report:?}");
    assert_eq!(events_of(&recs), events[..half].to_vec(), "everything up to the flush");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn rotated_files_are_each_whole_and_only_the_newest_are_kept() {
    let dir = temp("rotate");
    let events = common::lab_events("memlock-7.3.jsonl");
    let base = dir.join("run.jsonl");
    let mut w = Jsonl::create(&base, Some(Rotation { max_bytes: 64 << 10, keep: Some(3) })).unwrap();
    w.header(&common::test_header()).unwrap();
    let mut n = 0u64;
    for round in 0..6 {
        for e in &events {
            w.event(&std::sync::Arc::new(e.clone())).unwrap();
            n += 1;
        }
        w.stats(&stats(round, n)).unwrap();
    }
    w.trailer(&trailer(n)).unwrap();
    drop(w);
    let mut names: Vec<u32> = (0..1000).filter(|&i| rotated_name(&base, i).exists()).collect();
    names.sort();
    assert_eq!(names.len(), 3, "only the newest 3 files: {names:?}");
    assert!(names[0] > 0, "the first files were rotated away: {names:?}");
    assert!(names.windows(2).all(|w| w[1] == w[0] + 1), "consecutive: {names:?}");
    let mut next_seq = None;
    for i in &names {
        let path = rotated_name(&base, *i);
        let (recs, report) = read(&path);
        assert_eq!(
            (report.damaged, report.seq_gaps, report.cut_short),
            (0, 0, false),
            "{path:?}: {report:?}"
        );
        assert!(matches!(recs.first(), Some(Record::Header(_))), "{path:?} starts with the header");
        let Some(Record::Trailer(t)) = recs.last() else { panic!("{path:?} ends with a trailer") };
        if *i == *names.last().unwrap() {
            assert_eq!(t.stopped, "SIGINT");
        } else {
            assert!(t.stopped.contains(&rotated_name(&base, i + 1).display().to_string()), "{}", t.stopped);
        }
        let first = recs.first().unwrap().seq().unwrap();
        if let Some(want) = next_seq {
            assert_eq!(first, want, "the sequence runs on across files");
        }
        next_seq = Some(recs.last().unwrap().seq().unwrap() + 1);
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn follow_reads_a_growing_capture_until_its_trailer() {
    use std::io::Write;
    let dir = temp("follow");
    let events = common::lab_events("memlock-7.3.jsonl");
    let path = dir.join("run.jsonl");
    let mut w = Jsonl::create(&path, None).unwrap();
    w.header(&common::test_header()).unwrap();
    w.flush().unwrap();
    let reader = {
        let path = path.clone();
        std::thread::spawn(move || {
            let mut r = Reader::new(open(&path).unwrap(), false).following();
            let recs: Vec<Record> = r.by_ref().map(|x| x.unwrap()).collect();
            (recs, r.report)
        })
    };
    for (i, e) in events.iter().enumerate() {
        w.event(&std::sync::Arc::new(e.clone())).unwrap();
        if i % 100 == 0 {
            w.flush().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(150));
        }
    }
    // A line written in two halves is waited for, not damaged.
    let mut raw = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
    drop(w);
    let t = serde_json::to_string(&Trailer {
        v: 1,
        seq: events.len() as u64 + 1,
        ty: "trailer".into(),
        ..trailer(events.len() as u64)
    })
    .unwrap();
    let (a, b) = t.split_at(t.len() / 2);
    raw.write_all(a.as_bytes()).unwrap();
    raw.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    raw.write_all(format!("{b}\n").as_bytes()).unwrap();
    let (recs, report) = reader.join().unwrap();
    assert_eq!((report.damaged, report.cut_short), (0, false), "{report:?}");
    assert_eq!(events_of(&recs), events);
    assert!(matches!(recs.last(), Some(Record::Trailer(_))));
    std::fs::remove_dir_all(&dir).ok();
}
