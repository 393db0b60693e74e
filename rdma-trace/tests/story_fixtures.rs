//! The correlation engine on runs recorded in the lab (both kernels): the companion
//! workload with its step records, and perftest + rping traced by command.

use rdma_trace::event::Event;
use rdma_trace::event::FieldId;
use rdma_trace::pipeline::correlate::engine::{self, Engine, Limits};
use rdma_trace::pipeline::correlate::story::{self, Story};
use rdma_trace::source::capture::parse_jsonl;
use rdma_trace::steps::StepName;

mod common;

fn events(name: &str) -> Vec<Event> {
    let text = if name.ends_with(".zst") {
        let out = std::process::Command::new("zstd")
            .arg("-dc")
            .arg(common::lab_capture(name))
            .output()
            .expect("zstd");
        String::from_utf8(out.stdout).unwrap()
    } else {
        std::fs::read_to_string(common::lab_capture(name)).unwrap()
    };
    parse_jsonl(&text).unwrap()
}

#[test]
fn companion_steps_all_join_with_equal_values() {
    for k in ["6.12", "7.3"] {
        let evs = events(&format!("companion-{k}.jsonl"));
        let steps = story::read_steps(&common::lab_capture(&format!("companion-{k}.steps.jsonl"))).unwrap();
        let st = engine::build(&evs, &steps);
        assert!(st.unjoined.is_empty(), "{k}");
        let checks: Vec<_> = st.steps.iter().flat_map(|j| &j.checks).collect();
        assert!(checks.len() >= 27, "{k}: {} checks", checks.len());
        let failed: Vec<_> = checks.iter().filter(|c| !c.ok).collect();
        assert!(failed.is_empty(), "{k}: {failed:?}");
        // Each reg_mr step holds its pin: rxe_reg_user_mr and the umem pin, entry and return.
        for j in st.steps.iter().filter(|j| steps[j.step].name == StepName::RegMr) {
            let pins = j.events.iter().filter(|&&i| evs[i].path == rdma_trace::event::Path::Pin).count();
            assert_eq!(pins, 4, "{k}: step {}", steps[j.step].step);
        }
        let ps = &st.processes[&steps[0].process()];
        assert_eq!(ps.completions.len(), 6, "{k}");
        assert!(ps.completions.iter().all(|c| c.wakeup_latency_ns.is_some_and(|l| l > 0)), "{k}");
        // 1 + 16 + 256 pages pinned at the peak (4K, 64K, 1M MRs).
        assert_eq!(ps.pinned_peak_bytes, (1 + 16 + 256) * 4096, "{k}");
        // rxe's doorbell: one write(2) on the uverbs fd per posted work request.
        assert_eq!(
            ps.data_phase_syscalls.get("write[uverbs]"),
            Some(&6),
            "{k}: {:?}",
            ps.data_phase_syscalls
        );
        assert_eq!(ps.data_phase_syscalls.get("read[comp_channel]"), Some(&6), "{k}");
    }
}

fn perftest_rping(k: &str) -> (Vec<Event>, Story) {
    let evs = events(&format!("perftest-rping-{k}.jsonl.zst"));
    let st = engine::build(&evs, &[]);
    (evs, st)
}

#[test]
fn perftest_and_rping_every_completion_joins_its_process() {
    for k in ["6.12", "7.3"] {
        let (evs, st) = perftest_rping(k);
        assert!(st.unjoined.is_empty(), "{k}");
        let workloads: Vec<_> =
            st.processes.values().filter(|p| p.comm == "ib_send_bw" || p.comm == "rping").collect();
        assert_eq!(workloads.len(), 4, "{k}");
        let comps: usize = workloads.iter().map(|p| p.completions.len()).sum();
        let kernel_comps = evs
            .iter()
            .filter(|e| e.name == "comp_handler" && e.kind == rdma_trace::event::EventKind::Entry)
            .count();
        assert_eq!(comps, kernel_comps, "{k}: every completion belongs to a workload");
        for p in workloads {
            assert!(p.completions.iter().all(|c| evs[c.event].comm.starts_with("kworker")), "{k}");
            // Events are read in order: any the program never read (rping tears down with one
            // pending) come after the last one it did read.
            let woke = p.completions.iter().filter(|c| c.wakeup.is_some()).count();
            assert!(woke > 0 || p.completions.is_empty(), "{k} {} {}", p.comm, p.pid);
            assert!(
                p.completions.iter().take(woke).all(|c| c.wakeup.is_some()),
                "{k} {} {}: unread events only at the end",
                p.comm,
                p.pid
            );
        }
        // The counts bpftrace saw on the same run.
        let counts =
            std::fs::read_to_string(common::lab_capture(&format!("perftest-rping-{k}.counts.txt"))).unwrap();
        let bt_comp: usize = counts
            .lines()
            .find(|l| l.starts_with("comp_handler "))
            .and_then(|l| l.split("Some(").nth(1))
            .and_then(|v| v.trim_end_matches(')').trim().parse().ok())
            .unwrap();
        assert_eq!(kernel_comps, bt_comp, "{k}");
    }
}

/// The story report of the companion run, byte for byte.
#[test]
fn companion_story_report_golden() {
    let evs = events("companion-7.3.jsonl");
    let steps = story::read_steps(&common::lab_capture("companion-7.3.steps.jsonl")).unwrap();
    let text = rdma_trace::output::story::text(&engine::build(&evs, &steps), &evs, &steps);
    let golden = common::lab_capture("companion-7.3.story.txt");
    if std::env::var_os("RDMA_TRACE_BLESS").is_some() {
        std::fs::write(&golden, &text).unwrap();
    }
    assert_eq!(text, std::fs::read_to_string(&golden).unwrap_or_default(), "RDMA_TRACE_BLESS=1 to accept");
}

#[test]
fn corrupt_step_file_names_the_line() {
    let good = std::fs::read_to_string(common::lab_capture("companion-7.3.steps.jsonl")).unwrap();
    let bad: String = good.lines().take(3).chain(["{\"v\":0,\"run\":1"]).collect::<Vec<_>>().join("\n");
    let err = story::parse_steps(&bad).unwrap_err();
    assert!(err.to_string().starts_with("line 4:"), "{err}");
}

#[test]
fn pinning_over_memlock_is_explained() {
    for k in ["6.12", "7.3"] {
        let evs = events(&format!("memlock-{k}.jsonl"));
        let steps = story::read_steps(&common::lab_capture(&format!("memlock-{k}.steps.jsonl"))).unwrap();
        let st = engine::build(&evs, &steps);
        let reg = steps.iter().find(|s| s.name == StepName::RegMr).unwrap();
        let ps = &st.processes[&rdma_trace::event::Task::new(0, reg.pid)];
        assert_eq!(
            (ps.memlock_limit, ps.failed_pins.len(), ps.pinned_peak_bytes),
            (Some(65536), 1, 0),
            "{k}"
        );
        let text = rdma_trace::output::story::text(&st, &evs, &steps);
        assert!(text.contains("RLIMIT_MEMLOCK: 64 KiB"), "{k}: {text}");
        assert!(
            text.contains("pin REFUSED by the umem function: pages=256 umem=ERR_PTR(-12 ENOMEM)"),
            "{k}: {text}"
        );
        assert!(text.contains("pin errno 12 ✓"), "{k}: {text}");
    }
}

/// The story fed one event at a time, bounded as `story` runs it.
fn streamed(evs: &[Event], steps: &[rdma_trace::steps::StepRecord], limits: Limits) -> String {
    let mut live = Engine::new(steps.to_vec(), limits);
    for e in evs {
        live.push(e.clone());
    }
    let (st, kept, steps) = live.finish();
    rdma_trace::output::story::text(&st, &kept, &steps)
}

#[test]
fn the_story_fed_event_by_event_reads_as_the_whole_capture_at_once() {
    let cases = [
        ("companion-7.3.jsonl", Some("companion-7.3.steps.jsonl")),
        ("companion-6.12.jsonl", Some("companion-6.12.steps.jsonl")),
        ("memlock-7.3.jsonl", Some("memlock-7.3.steps.jsonl")),
        ("memlock-6.12.jsonl", Some("memlock-6.12.steps.jsonl")),
        ("perftest-rping-7.3.jsonl.zst", None),
        ("perftest-rping-6.12.jsonl.zst", None),
        ("session-7.3.jsonl", None),
        ("session-6.12.jsonl", None),
    ];
    for (capture, steps) in cases {
        let evs = events(capture);
        let steps = steps.map(|s| story::read_steps(&common::lab_capture(s)).unwrap()).unwrap_or_default();
        let whole = rdma_trace::output::story::text(&engine::build(&evs, &steps), &evs, &steps);
        assert_eq!(streamed(&evs, &steps, Limits::default()), whole, "{capture}");
    }
}

#[test]
fn a_bounded_story_keeps_its_counts_and_says_what_it_let_go() {
    let evs = events("perftest-rping-7.3.jsonl.zst");
    let whole = engine::build(&evs, &[]);
    let small =
        Limits { events: 200, per_list: 50, processes: 100, reorder_ns: 1_000_000_000, reorder_max: 1000 };
    let text = streamed(&evs, &[], small);
    let mut live = Engine::new(vec![], small);
    for e in &evs {
        live.push(e.clone());
    }
    let (st, _, _) = live.finish();
    assert_eq!(st.evicted_events, evs.len() as u64 - 200);
    for (pid, ps) in &whole.processes {
        let b = &st.processes[pid];
        let counts = |p: &rdma_trace::pipeline::correlate::story::ProcessStory| {
            (p.event_count, p.calls_total, p.completions_total, p.pinned_peak_bytes)
        };
        assert_eq!(counts(b), counts(ps), "pid {pid}: counts are aggregates");
        assert_eq!(b.data_phase_syscalls, ps.data_phase_syscalls, "pid {pid}");
        assert!(b.events.len() <= 50 && b.calls.len() <= 50 && b.completions.len() <= 50);
    }
    assert!(text.contains("events were let go to bound memory"), "{text}");
    assert!(text.contains("earlier calls not kept"), "{text}");
}

#[test]
fn past_its_process_limit_the_story_retires_the_quietest() {
    let evs = events("companion-7.3.jsonl");
    let span = evs.iter().map(|e| e.ts_ns).max().unwrap() + 1;
    let limits = Limits { processes: 2, ..Limits::default() };
    let mut live = Engine::new(vec![], limits);
    // Five runs of the companion, one after the other, each as other processes.
    for k in 0..5u32 {
        for e in &evs {
            let mut e = e.clone();
            e.pid += 100_000 * k;
            e.tid += 100_000 * k;
            e.ts_ns += span * k as u64;
            live.push(e);
        }
    }
    let (st, kept, steps) = live.finish();
    assert_eq!(st.processes.len(), 2);

    assert!(
        st.processes.keys().all(|&p| p.pid >= 400_000),
        "the last run's are kept: {:?}",
        st.processes.keys()
    );
    let whole = engine::build(&evs, &[]);
    assert_eq!(st.retired_processes as usize, 5 * whole.processes.len() - 2);
    let text = rdma_trace::output::story::text(&st, &kept, &steps);
    assert!(text.contains("processes were retired"), "{text}");
}

/// Issue 39: a daemon up for days sees QPs and CQs come and go. A process the story
/// retires (past its process limit) takes its QP and CQ rows with it: on a lab host of
/// ib_send_bw, rping and the companion, with room for one process, every QP and CQ row
/// left is the kept one's.
#[test]
fn a_retired_process_takes_its_qps_and_cqs_with_it() {
    let evs = events("pair-7.3-reused-cq.host1.jsonl.zst");
    let whole = engine::build(&evs, &[]);
    let drivers =
        |st: &Story| st.qps.rows.values().map(|r| r.pid.pid).collect::<std::collections::BTreeSet<u32>>();
    assert!(
        drivers(&whole).len() >= 2,
        "the whole story has QPs of several processes: {:?}",
        drivers(&whole)
    );
    let mut live = Engine::new(vec![], Limits { processes: 1, ..Limits::default() });
    for e in &evs {
        live.push(e.clone());
    }
    let (st, _, _) = live.finish();
    assert!(st.retired_processes > 0);
    let kept: Vec<rdma_trace::event::Task> = st.processes.keys().copied().collect();
    assert!(st.qps.rows.values().all(|r| kept.contains(&r.pid)), "QPs of {:?}, kept {kept:?}", drivers(&st));
    assert!(st.cqs.values().all(|c| c.pid.is_none_or(|p| kept.contains(&p))), "kept {kept:?}");
    // Completions that come after their owner was retired make a row with no owner, as a
    // CQ made before the trace does: the rows with an owner are the kept processes'.
    let n = |s: &Story| (s.qps.rows.len(), s.cqs.values().filter(|c| c.pid.is_some()).count());
    assert!(n(&st).0 < n(&whole).0 && n(&st).1 < n(&whole).1, "{:?} of {:?}", n(&st), n(&whole));
}

/// Steps announced live (each where its marker would put it: after the events up to its
/// end) give the story a step file gives; read again from the file at the end, each is
/// joined once.
#[test]
fn steps_announced_live_tell_the_story_the_step_file_tells() {
    use rdma_trace::sink::Sink;
    for k in ["6.12", "7.3"] {
        for name in ["companion", "memlock"] {
            let evs = events(&format!("{name}-{k}.jsonl"));
            let steps = story::read_steps(&common::lab_capture(&format!("{name}-{k}.steps.jsonl"))).unwrap();
            let whole = rdma_trace::output::story::text(&engine::build(&evs, &steps), &evs, &steps);
            let mut sink = rdma_trace::pipeline::correlate::engine::StorySink(Engine::new(
                Vec::new(),
                Limits::default(),
            ));
            let mut pending = steps.iter().peekable();
            for e in &evs {
                while let Some(s) = pending.next_if(|s| s.t_end_ns < e.ts_ns) {
                    sink.step(s).unwrap();
                }
                sink.event(&std::sync::Arc::new(e.clone())).unwrap();
            }
            pending.for_each(|s| sink.step(s).unwrap());
            sink.0.add_steps(steps.clone());
            let (st, kept, joined) = sink.0.finish();
            assert_eq!(joined.len(), steps.len(), "{name} {k}: each step once");
            let live = rdma_trace::output::story::text(&st, &kept, &joined);
            assert_eq!(live, whole, "{name} {k}");
        }
    }
}

/// Past the step bound, the steps read again from the file at the end are not taken as new:
/// the newest are kept, each step let go is counted once.
#[test]
fn steps_past_the_bound_read_again_are_not_new() {
    let steps = story::read_steps(&common::lab_capture("companion-7.3.steps.jsonl")).unwrap();
    let per_list = 10;
    assert!(steps.len() > 2 * per_list, "{}", steps.len());
    let mut live = Engine::new(Vec::new(), Limits { per_list, ..Limits::default() });
    for s in &steps {
        live.add_steps(vec![s.clone()]);
    }
    live.add_steps(steps.clone());
    let (st, _, kept) = live.finish();
    let mut newest: Vec<u64> = steps.iter().map(|s| s.t_end_ns).collect();
    newest.sort_unstable();
    let newest = &newest[newest.len() - per_list..];
    assert_eq!(kept.iter().map(|s| s.t_end_ns).collect::<Vec<_>>(), newest, "the newest steps are kept");
    assert_eq!(st.evicted_steps as usize, steps.len() - per_list, "each step let go counted once");
}

/// Every uverbs mapping of the companion's lab runs is named by its queue, the same with
/// the step file and from the libibverbs probes alone: two CQ rings (the handles its
/// create_cq steps report) and each QP's send and receive queue (their qpns), each ring as
/// long as the buffer it maps (a 384-byte header, then slots × entry size, in pages).
#[test]
fn companion_mappings_are_named_by_their_queues() {
    use rdma_trace::pipeline::correlate::mmaps::{Object, QueueKind};
    for k in ["6.12", "7.3"] {
        let evs = events(&format!("companion-{k}.jsonl"));
        let steps = story::read_steps(&common::lab_capture(&format!("companion-{k}.steps.jsonl"))).unwrap();
        let mut want: Vec<String> = Vec::new();
        for s in &steps {
            if let (StepName::CreateCq, Some(cq)) = (s.name, &s.cq) {
                want.push(format!("{:?} {:?}", QueueKind::Cq, Object::Cq(cq.handle)));
            }
            if let (StepName::CreateQp, Some(qp)) = (s.name, &s.qp) {
                want.push(format!("{:?} {:?}", QueueKind::Sq, Object::Qp(qp.qpn)));
                want.push(format!("{:?} {:?}", QueueKind::Rq, Object::Qp(qp.qpn)));
            }
        }
        want.sort();
        assert_eq!(want.len(), 6, "{k}: two CQs and two QPs");
        for with in [&steps[..], &[]] {
            let st = engine::build(&evs, with);
            let ps = st.processes.values().find(|p| p.mappings_total > 0).expect("a process that mapped");
            let mut got: Vec<String> = ps
                .mappings
                .iter()
                .map(|m| {
                    let q = m.queue.as_ref().unwrap_or_else(|| panic!("{k}: unnamed {m:?}"));
                    let (n, e) = (q.entries.unwrap() + 1, q.entry_bytes.unwrap());
                    assert_eq!(q.bytes, 384 + n * e, "{k}: {q}");
                    assert_eq!(m.end - m.start, q.bytes.div_ceil(4096) * 4096, "{k}: {q}");
                    assert!(m.unmapped, "{k}: the companion unmaps at exit: {q}");
                    format!("{:?} {:?}", q.kind, q.object.unwrap())
                })
                .collect();
            got.sort();
            assert_eq!(got, want, "{k}, {} steps", with.len());
        }
    }
}

/// perftest (ib_send_bw -e, which makes its CQs with ibv_create_cq_ex, not probed) and
/// rping: every mapping is named; a CQ ring is named by the handle its completions carry
/// (by its kernel pointer only when it raised none); each QP's two queues by its number.
#[test]
fn perftest_and_rping_mappings_are_named() {
    use rdma_trace::pipeline::correlate::mmaps::{Object, QueueKind};
    for k in ["6.12", "7.3"] {
        let evs = events(&format!("perftest-rping-{k}.jsonl.zst"));
        let st = engine::build(&evs, &[]);
        let mut by_handle = 0;
        for ps in st.processes.values().filter(|p| p.comm == "ib_send_bw" || p.comm == "rping") {
            assert!(ps.mappings.len() >= 3, "{k} {} {}: a CQ and a QP's queues", ps.comm, ps.pid);
            let handles: Vec<u64> = ps.completions.iter().map(|c| c.cq_user_handle).collect();
            for m in &ps.mappings {
                let q = m.queue.as_ref().unwrap_or_else(|| panic!("{k} {}: unnamed {m:?}", ps.comm));
                match (q.kind, q.object) {
                    (QueueKind::Cq, Some(Object::Cq(h))) => by_handle += usize::from(handles.contains(&h)),
                    (QueueKind::Cq, Some(Object::KernelCq(c))) => assert!(
                        !ps.completions.iter().any(|x| evs[x.event].field(FieldId::Cq) == Some(c)),
                        "{k} {}: {q}",
                        ps.comm
                    ),
                    (QueueKind::Sq | QueueKind::Rq, Some(Object::Qp(_))) => {}
                    other => panic!("{k} {}: {q}: {other:?}", ps.comm),
                }
            }
        }
        assert!(by_handle >= 2, "{k}: the CQs that raised events are named by their handle");
    }
}

/// The rows every view reads are the story's, and they hold what the companion announced:
/// each MR with its range, access, pages and keys, released by the end; the send CQ with
/// its six completions, each hop measured; every mapping named by its queue (a CQ's ring, a
/// QP's send or receive queue) and unmapped by the end.
#[test]
fn the_storys_rows_are_what_the_companion_announced() {
    for k in ["6.12", "7.3"] {
        let evs = events(&format!("companion-{k}.jsonl"));
        let steps = story::read_steps(&common::lab_capture(&format!("companion-{k}.steps.jsonl"))).unwrap();
        let st = engine::build(&evs, &steps);
        let ps = &st.processes[&steps[0].process()];
        let announced: Vec<_> =
            steps.iter().filter(|s| s.name == StepName::RegMr).filter_map(|s| s.mr.as_ref()).collect();
        assert_eq!(ps.mrs.len(), announced.len(), "{k}");
        for (row, mr) in ps.mrs.iter().zip(&announced) {
            let got = (row.addr, row.length, row.pages, row.access, row.lkey, row.rkey);
            let want = (
                mr.addr,
                mr.length,
                Some(mr.pages_4k),
                Some(u64::from(mr.access)),
                Some(mr.lkey.into()),
                Some(mr.rkey.into()),
            );
            assert_eq!(got, want, "{k}");
            assert!(
                !row.live && row.refused.is_none() && row.latency_ns.is_some_and(|l| l > 0),
                "{k}: {row:?}"
            );
        }
        assert_eq!((ps.mrs_live, ps.pinned_bytes), (0, 0), "{k}");
        let send = steps.iter().filter_map(|s| s.cq.as_ref()).find(|c| c.role == "send").unwrap();
        let cq = &st.cqs[&send.handle];
        assert_eq!((cq.pid, cq.completions), (Some(steps[0].process()), 6), "{k}");
        assert_eq!(cq.per_second.iter().sum::<u64>(), 6, "{k}");
        for (hop, s) in [("handler", &cq.handler_ns), ("wakeup", &cq.wakeup_ns), ("library", &cq.library_ns)]
        {
            assert_eq!(s.0.len(), 6, "{k}: {hop}");
            assert!(s.0.iter().all(|&ns| ns > 0), "{k}: {hop} {s:?}");
        }
        assert_eq!(st.wakeup_ns.0.len(), 6, "{k}");
        assert!(!ps.mappings.is_empty(), "{k}");
        for m in &ps.mappings {
            assert!(m.queue.is_some() && m.unmapped, "{k}: {m:?}");
            let what = m.what();
            assert!(what.contains("CQ") || what.starts_with("QP "), "{k}: {what}");
        }
    }
}
