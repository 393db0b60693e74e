//! Every TUI screen rendered from lab captures of both kernels (TestBackend, insta
//! snapshots): drawing is a pure function of the model and the UI state.

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use rdma_trace::capture::Record;
use rdma_trace::event::FieldId;
use rdma_trace::sink::Sink;
use rdma_trace::tui::screens;
use rdma_trace::tui::ui::{Mode, Panel, Screen, Ui};
use rdma_trace::tui::{self, lesson, model::Model};

use rdma_trace::pipeline::correlate::story;
use rdma_trace::source::capture::{Reader, open};
use std::path::Path;

/// The screens' model of a lab capture, fed as the TUI feeds it (the story behind it
/// included); a companion run's steps (its step file beside it) come in where its marker
/// would have announced each: after the events up to the step's end.
fn fed(capture: &str) -> tui::Feeder {
    fed_until(capture, |_| false)
}

/// As `fed`, the capture's events before the first that `stop` takes.
fn fed_until(capture: &str, stop: impl Fn(&rdma_trace::event::Event) -> bool) -> tui::Feeder {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab");
    let steps_file = dir.join(capture.replace(".jsonl", ".steps.jsonl"));
    let steps = if steps_file.is_file() { story::read_steps(&steps_file).unwrap() } else { Vec::new() };
    let mut steps = steps.iter().peekable();
    let (mut f, _slot) = tui::channel(format!("file {capture}"), true);
    for r in Reader::new(open(&dir.join(capture)).unwrap(), true) {
        match r.unwrap() {
            Record::Event(e) if stop(&e) => break,
            Record::Event(e) => {
                while let Some(s) = steps.next_if(|s| s.t_end_ns < e.ts_ns) {
                    f.step(s).unwrap();
                }
                f.event(&e.clone()).unwrap();
            }
            Record::Header(h) => f.header(&h).unwrap(),
            _ => {}
        }
    }
    steps.for_each(|s| f.step(s).unwrap());
    f.caught_up();
    f
}

fn model(capture: &str) -> Model {
    fed(capture).model
}

/// What `e` shows for the selected row: the screen's choice, answered by the story.
fn explained(f: &mut tui::Feeder, ui: &Ui) -> String {
    let (topic, anchor) = lesson::chosen(&f.model, ui).unwrap();
    let m = f.model.clone();
    lesson::answer(&mut f.engine, &lesson::Ask { id: 1, topic, anchor, width: 88 }, &m)
}

fn render(m: &Model, ui: &Ui, w: u16, h: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| screens::draw(f, m, ui)).unwrap();
    t.backend().to_string()
}

#[test]
fn every_screen_of_the_companion_run_at_80x24() {
    let m = model("companion-7.3.jsonl");
    for screen in Screen::ALL {
        let (name, ui) = (screen.name(), Ui { screen, ..Default::default() });
        insta::assert_snapshot!(format!("companion-7.3-{name}-80x24"), render(&m, &ui, 80, 24));
    }
}

#[test]
fn every_screen_of_perftest_and_rping_at_120x40() {
    let m = model("perftest-rping-6.12.jsonl.zst");
    for screen in Screen::ALL {
        let (name, ui) = (screen.name(), Ui { screen, ..Default::default() });
        insta::assert_snapshot!(format!("perftest-rping-6.12-{name}-120x40"), render(&m, &ui, 120, 40));
    }
}

/// The Steps screen of the companion on the other kernel, a registration selected: its
/// checks (the MR's range, pages and keys, step against kernel) and its events.
#[test]
fn the_steps_screen_shows_a_registration_and_its_checks() {
    let m = model("companion-6.12.jsonl");
    let newest_first: Vec<_> = m.steps.iter().rev().collect();
    let selected = newest_first.iter().position(|s| s.name == "reg_mr").expect("a reg_mr step");
    let screen = render(&m, &Ui { screen: Screen::Steps, selected, ..Default::default() }, 120, 40);
    let reg = newest_first[selected];
    assert!(reg.checks.len() >= 5 && reg.checks.iter().all(|c| c.ok), "{:?}", reg.checks);
    assert!(screen.contains("✓ umem size"), "{screen}");
    insta::assert_snapshot!("companion-6.12-Steps-120x40", screen);
}

#[test]
fn a_refused_pin_is_explained_and_help_and_filter_show() {
    let m = model("memlock-7.3.jsonl");
    let pinning = render(&m, &Ui { screen: Screen::Pinning, ..Default::default() }, 120, 30);
    assert!(pinning.contains("REFUSED ENOMEM"), "{pinning}");
    insta::assert_snapshot!("memlock-7.3-Pinning-120x30", pinning);
    let help = render(&m, &Ui { mode: Mode::Normal.with_help(), ..Default::default() }, 80, 24);
    assert!(help.contains("? esc       close this help; q quits"), "{help}");
    let filtered = render(
        &m,
        &Ui { screen: Screen::Events, filter: "no-such-process".into(), ..Default::default() },
        80,
        24,
    );
    assert!(filtered.contains("events (0 kept"), "{filtered}");
}

/// `e` on a selected event: the explanation of its path, anchored on that event — a
/// completion handler selected explains the completion it raised (its CQ, its wakeup), a
/// registration the pin it made; the same text as `explain` for that occurrence.
#[test]
fn e_on_an_event_explains_its_path_for_that_occurrence() {
    use rdma_trace::event::{EventKind, ProbeId};
    for k in ["6.12", "7.3"] {
        let mut f = fed(&format!("companion-{k}.jsonl"));
        let m = f.model.clone();
        let ui = Ui { screen: Screen::Events, ..Default::default() };
        let shown = rdma_trace::tui::ui::shown_events(&m, &ui);
        // The newest pin entry shown, and the oldest completion handler shown.
        let pin = shown.iter().position(|e| e.is(ProbeId::UmemGet) && e.kind == EventKind::Entry).unwrap();
        let comp =
            shown.iter().rposition(|e| e.is(ProbeId::CompHandler) && e.kind == EventKind::Entry).unwrap();
        let (pin_ev, comp_ev) = (shown[pin].clone(), shown[comp].clone());
        let text = explained(&mut f, &Ui { selected: pin, ..ui.clone() });
        let size = pin_ev.field(FieldId::Size).unwrap();
        assert!(
            text.contains(&format!("size={size}")) || text.contains(&format!("size={size:#x}")),
            "{k}: {text}"
        );
        assert!(text.contains(&format!("thread {}", pin_ev.tid)), "{k}: {text}");
        let cq = comp_ev.field(FieldId::CqUserHandle).unwrap();
        let text = explained(&mut f, &Ui { selected: comp, ..ui.clone() });
        assert!(text.contains(&format!("CQ {cq:#x}")), "{k}: {text}");
        assert!(text.contains(&format!("[{}] on CPU {}", comp_ev.tid, comp_ev.cpu)), "{k}: {text}");
        let screen = render(
            &m,
            &Ui { mode: Mode::Text(Panel { text, ..Default::default() }), selected: comp, ..ui.clone() },
            100,
            30,
        );
        insta::assert_snapshot!(format!("companion-{k}-Events-explain-cq-100x30"), screen);
    }
}

/// A viewer that joins a daemon late gets the MRs registered before it from the kernel's
/// tables (`rdma res`: keys and restrack id, no address). They are live until the
/// `rdma_core:mr_dereg` tracepoint names their id; then their pages stop counting.
/// The 6.12 lab session: its `rdma res` listing (two ib_write_bw MRs) and its own deregs.
#[test]
fn mrs_from_the_kernels_tables_end_on_their_dereg() {
    use rdma_trace::capture::State;
    use rdma_trace::live::seed;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab");
    let json = std::fs::read_to_string(dir.join("session-6.12.rdma-res-mr.json")).unwrap();
    let processes = seed::group(seed::parse_res_mr(&json).unwrap(), |_| Vec::new());
    let (mut f, _slot) = tui::channel("daemon (lab session 6.12)".into(), false);
    // A daemon's stream: its header (v1, loss accounted), then the state.
    f.header(&Default::default()).unwrap();
    f.state(&State { processes, ..Default::default() }).unwrap();
    let ui = Ui { screen: Screen::Pinning, ..Default::default() };
    insta::assert_snapshot!("seeded-6.12-Pinning-80x24", render(&f.model, &ui, 80, 24));
    assert_eq!(f.model.procs[&rdma_trace::event::Task::new(0, 236)].pinned, 131072);
    let deregs: Vec<_> = Reader::new(open(&dir.join("session-6.12.jsonl")).unwrap(), true)
        .filter_map(|r| match r.unwrap() {
            Record::Event(e) if e.is(rdma_trace::event::ProbeId::MrDereg) => Some(e),
            _ => None,
        })
        .collect();
    // Another process's dereg (rping's MR 4) ends none of them.
    let other = deregs.iter().find(|e| e.field(FieldId::MrId) == Some(4)).unwrap();
    f.event(&other.clone()).unwrap();
    f.caught_up();
    assert!(f.model.mrs.iter().all(|r| r.live), "{:?}", f.model.mrs);
    for e in &deregs {
        f.event(&e.clone()).unwrap();
    }
    f.caught_up();
    let m = &f.model;
    for pid in [236, 237] {
        let p = &m.procs[&rdma_trace::event::Task::new(0, pid)];
        assert_eq!((p.pinned, p.mrs_live, p.mrs_total), (0, 0, 1), "{p:?}");
    }
    assert!(m.mrs.iter().all(|r| !r.live && r.from_tables()), "{:?}", m.mrs);
    let after = render(m, &ui, 80, 24);
    assert_eq!(after.matches("dereg").count(), 2, "{after}");
}

/// The line of `screen` that holds `key`, and the lines above it (a table's header).
fn row_of<'a>(screen: &'a str, key: &str) -> Option<&'a str> {
    screen.lines().find(|l| l.contains(key))
}

/// At 80 columns and narrower, a table gives up lesser columns (and says so in its title)
/// before it shortens an address, and the status line keeps what was lost and the help
/// key. Each check is on the values the model holds, not on the snapshot: an address cut
/// to a plausible shorter one (`0x7fd062d6c000` as `0x7fd062d6c00`) must fail here.
#[test]
fn addresses_keys_and_latencies_stay_whole_on_narrow_terminals() {
    for capture in ["companion-7.3.jsonl", "perftest-rping-6.12.jsonl.zst"] {
        let mut m = model(capture);
        m.source = "daemon /work/main/target/lab/run/trixie-backports/rdma-trace.sock".into();
        for w in [80, 60, 40] {
            let pinning = render(&m, &Ui { screen: Screen::Pinning, ..Default::default() }, w, 24);
            let header = pinning.lines().nth(2).unwrap();
            for r in m.mrs.iter().rev().take(20) {
                let addr = format!("{:#x}", r.addr);
                let row = row_of(&pinning, &addr);
                let row = row.unwrap_or_else(|| panic!("{capture} at {w}: MR {addr} not whole:\n{pinning}"));
                // Each key shown is whole: followed by a gap or the border, never cut.
                let keys = [r.lkey.unwrap(), r.rkey.unwrap()].map(|k| format!("{k:#x}"));
                let shown = if header.contains("rkey") { 2 } else { 1 };
                let whole =
                    |k: &str| row.matches(&format!("{k} ")).count() + row.matches(&format!("{k}│")).count();
                let found: usize =
                    if keys[0] == keys[1] { whole(&keys[0]) } else { whole(&keys[0]) + whole(&keys[1]) };
                assert_eq!(found, shown, "{capture} at {w}: keys {keys:?} in {row}");
            }
            assert!(
                w >= 80 || pinning.contains("hidden") || pinning.contains("no room for"),
                "{capture} at {w}: a hidden column unnamed:\n{pinning}"
            );
            let mmap = render(&m, &Ui { screen: Screen::Mmap, ..Default::default() }, w, 24);
            for r in m.maps.iter().rev().take(20) {
                let start = format!("{:#x}", r.start);
                assert!(mmap.contains(&start), "{capture} at {w}: mapping {start} not whole:\n{mmap}");
            }
            // The CQ table (above the selected CQ's path): a CQ's row has its own p99.
            let cqs = render(&m, &Ui { screen: Screen::Completions, ..Default::default() }, w, 30);
            let table = cqs.split("completion path of").next().unwrap();
            for c in m.cqs.values() {
                let handle = format!("{:#x}", c.handle);
                let p99 = rdma_trace::tui::format::ns(c.wakeup_ns.quantile(0.99));
                let row = row_of(table, &format!("{handle} "))
                    .unwrap_or_else(|| panic!("{capture} at {w}: CQ {handle}:\n{cqs}"));
                assert!(row.contains(&format!(" {p99} ")), "{capture} at {w}: CQ {handle} p99 {p99}: {row}");
            }
            let status = pinning.lines().last().unwrap();
            // At 80 the socket's path keeps its end: "daemon …/rdma-trace.sock".
            let mut kept = vec!["│ 0 lost", "? help"];
            if w >= 80 {
                kept.extend(["daemon …", "/rdma-trace.sock │"]);
            }
            for kept in kept {
                assert!(status.contains(kept), "{capture} at {w}: {kept:?} not on the status line: {status}");
            }
        }
    }
}

/// A box on the Overview with more processes or CQs than rows shows whole ones and
/// counts the rest ("+2 more CQs (4 Completions)"); it never cuts one through.
#[test]
fn the_overview_shows_whole_items_and_counts_the_rest() {
    let m = model("perftest-rping-6.12.jsonl.zst");
    let procs = m.procs.values().filter(|p| p.mrs_total > 0 || p.refused > 0).count();
    let number = |s: &str| -> usize { s.split(' ').next().and_then(|n| n.parse().ok()).unwrap_or(0) };
    for h in [40, 24, 16, 10, 8] {
        let overview = render(&m, &Ui::default(), 80, h);
        let lines: Vec<&str> = overview.lines().collect();
        // A CQ's label starts at its "CQ 0x…" line; its wake figures are in the next lines
        // of the same (rightmost) box.
        let right = |l: &str| l.chars().skip(54).collect::<String>();
        let mut shown = 0;
        for c in m.cqs.values() {
            let Some(at) = lines.iter().position(|l| right(l).contains(&format!("CQ {:#x}", c.handle)))
            else {
                continue;
            };
            shown += 1;
            let label: String = lines[at..(at + 6).min(lines.len())].iter().map(|l| right(l)).collect();
            for q in [0.5, 0.99] {
                let v = rdma_trace::tui::format::ns(c.wakeup_ns.quantile(q));
                let name = if q == 0.5 { "p50" } else { "p99" };
                assert!(
                    label.contains(&format!("{name} {v}")),
                    "at 80x{h}: CQ {:#x} {name} {v} cut:\n{overview}",
                    c.handle
                );
            }
        }
        // "+N more … (K Screen)" lines, by the screen they point to.
        let counted = |to: &str| -> usize {
            overview
                .split('+')
                .skip(1)
                .filter(|r| r.split('│').next().unwrap().contains(to))
                .map(number)
                .sum()
        };
        let whole_procs = overview.matches(" live/").count();
        assert_eq!(shown + counted("(4 Completions)"), m.cqs.len(), "at 80x{h}:\n{overview}");
        assert_eq!(whole_procs + counted("(2 Pinning)"), procs, "at 80x{h}:\n{overview}");
        if h <= 16 {
            assert!(counted("(4 Completions)") > 0, "at 80x{h} all CQs fit?\n{overview}");
        }
        if h <= 10 {
            assert!(counted("(2 Pinning)") > 0, "at 80x{h} all processes fit?\n{overview}");
        }
    }
}

/// Every screen draws at every small size, from an empty model and from lab captures,
/// without a panic (ratatui's buffer and our width arithmetic both index by cell).
#[test]
fn every_screen_draws_at_tiny_sizes() {
    let models =
        [Model::new(String::new()), model("companion-7.3.jsonl"), model("perftest-rping-6.12.jsonl.zst")];
    for m in &models {
        for screen in Screen::ALL {
            for mode in [Mode::Normal, Mode::Normal.with_help()] {
                const SIZES: [u16; 8] = [0, 1, 2, 3, 5, 8, 13, 30];
                for (w, h) in SIZES.iter().flat_map(|&w| SIZES.iter().map(move |&h| (w + w / 2, h))) {
                    let ui = Ui { screen, mode: mode.clone(), ..Default::default() };
                    // (Only drawn: TestBackend cannot print a buffer 0 cells wide.)
                    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
                    t.draw(|f| screens::draw(f, m, &ui)).unwrap();
                }
            }
        }
    }
}

/// The status line at 40 columns with skipped probes and a filter being typed: the parts
/// that matter stay (lost, skipped, the filter, the help key); the rest gives way.
#[test]
fn the_status_line_keeps_loss_skips_filter_and_help_when_narrow() {
    let mut m = model("companion-7.3.jsonl");
    m.source = "daemon /run/rdma-trace/rdma-trace.sock".into();
    (m.attached, m.skipped, m.lost_total) = (100, 3, 12);
    let ui = Ui { filter: "0x15e9".into(), mode: Mode::Filter, ..Default::default() };
    for w in [120, 80, 60, 50] {
        let screen = render(&m, &ui, w, 24);
        let status = screen.lines().last().unwrap();
        for kept in ["12 lost", "3 skipped", "/0x15e9", "? help"] {
            assert!(status.contains(kept), "at {w}: {kept:?} not on the status line: {status}");
        }
    }
    let wide = render(&m, &ui, 120, 24);
    assert!(
        wide.lines().last().unwrap().contains("daemon /run/rdma-trace/rdma-trace.sock │ 851 ev"),
        "{wide}"
    );
}

/// Where a narrow terminal cuts something, it says so: every tab keeps its number, a box
/// title that does not fit ends in `…`, the help box counts the lines it has no room for,
/// and a status line whose kept parts are still too wide ends in `…`.
#[test]
fn narrow_terminals_cut_with_an_ellipsis_never_silently() {
    let m = model("companion-7.3.jsonl");
    for w in [24, 30, 40, 60] {
        for screen in Screen::ALL {
            let s = render(&m, &Ui { screen, ..Default::default() }, w, 12);
            let tabs = s.lines().next().unwrap();
            let mut at = 0;
            for k in 1..=6 {
                let found = tabs[at..].find(&k.to_string());
                assert!(found.is_some(), "at {w}: tab {k} missing: {tabs}");
                at += found.unwrap() + 1;
            }
            let name = screen.name();
            assert!(tabs.contains(name) || tabs.contains('…'), "at {w}: {name} cut silently: {tabs}");
        }
    }
    let cq = render(&m, &Ui { screen: Screen::Completions, ..Default::default() }, 30, 24);
    let title = cq.lines().find(|l| l.contains("┌comp")).unwrap_or_else(|| panic!("{cq}"));
    assert!(title.contains('…'), "the CQ box's title is cut without …: {title}");
    let help = render(&m, &Ui { mode: Mode::Normal.with_help(), ..Default::default() }, 40, 12);
    assert!(help.contains("more lines") && help.contains('…'), "{help}");
    let status = render(&m, &Ui::default(), 14, 6);
    let last = status.lines().last().unwrap().trim_matches('"').trim_end();
    assert!(last.ends_with('…'), "status line cut silently: {last:?}");
}

/// Issue 39: on a screen of two hosts, what was lost says where and why (the daemons'
/// accounting per host, and what a daemon did not send this view), the largest first,
/// while there is room; the total always stays.
#[test]
fn the_status_line_says_which_host_lost_what_and_why() {
    use rdma_trace::capture::{LossReason, LossSite, SiteCount, Stats};
    use rdma_trace::tui::HostLine;
    let mut m = model("companion-7.3.jsonl");
    m.hosts = vec![
        HostLine { name: "rdma-lab-1".into(), ..Default::default() },
        HostLine { name: "rdma-lab-2".into(), clock: "+1.000 ms ± 0.100 ms".into(), ..Default::default() },
    ];
    m.source = "rdma-lab-1 · rdma-lab-2 +1.000 ms ± 0.100 ms".into();
    let stats = |reason: LossReason, n: u64| Stats {
        sites: vec![SiteCount {
            site: LossSite::Probe("ib_umem_get".into()),
            lost: [(reason, n)].into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    m.host_stats(0, &stats(LossReason::SkippedByKernel, 9).sites);
    m.host_stats(1, &stats(LossReason::RingFull, 30).sites);
    m.host_not_sent(1, 5);
    assert_eq!(m.lost_total, 39);
    let ui = Ui::default();
    let wide = render(&m, &ui, 200, 24);
    let status = wide.lines().last().unwrap();
    assert!(
        status.contains("39 lost +5 not sent to this view (rdma-lab-2 ring full 30, rdma-lab-1 skipped by the kernel 9, 1 more)"),
        "{status}"
    );
    for w in [80, 60] {
        let narrow = render(&m, &ui, w, 24);
        assert!(narrow.lines().last().unwrap().contains("39 lost"), "at {w}: {narrow}");
    }
    // `l`: the loss view lists each host's sites and reasons, at 80 columns.
    let view = render(&m, &Ui { mode: Mode::Loss, ..Default::default() }, 80, 24);
    for want in [
        "rdma-lab-1: 9 lost, 0 not sent to this view",
        "ib_umem_get          9  skipped by the kernel",
        "rdma-lab-2: 30 lost, 5 not sent to this view",
        "ib_umem_get         30  ring full",
        "5 not sent: this view fell behind its daemon",
    ] {
        assert!(view.contains(want), "{want:?} not in\n{view}");
    }
    // One source: the reasons alone.
    let mut one = model("companion-7.3.jsonl");
    one.stats(&stats(LossReason::RingFull, 4).sites);
    let status = render(&one, &ui, 160, 24);
    assert!(status.lines().last().unwrap().contains("4 lost (ring full 4)"), "{status}");
    assert_eq!(model("companion-7.3.jsonl").loss_words(2), None, "nothing lost, nothing said");
}

/// Issue 40: a v0 capture has no account of its loss: the status line says so rather than
/// "0 lost"; a v1 capture's says what its stats counted.
#[test]
fn a_capture_with_no_account_never_says_0_lost() {
    let v0 = render(&model("session-6.12.jsonl"), &Ui::default(), 120, 24);
    let status = v0.lines().last().unwrap();
    assert!(status.contains("loss not known (v0)") && !status.contains("0 lost"), "{status}");
    let v1 = render(&model("companion-7.3.jsonl"), &Ui::default(), 120, 24);
    assert!(v1.lines().last().unwrap().contains(" 0 lost"), "{v1}");
    let view = render(&model("session-6.12.jsonl"), &Ui { mode: Mode::Loss, ..Default::default() }, 80, 24);
    assert!(view.contains("keeps no account of loss") && !view.contains("0 lost"), "{view}");
    let view = render(&model("companion-7.3.jsonl"), &Ui { mode: Mode::Loss, ..Default::default() }, 80, 24);
    assert!(view.contains("0 lost, 0 not sent to this view"), "{view}");
}

/// Issue 40: the Mmap screen leads with what is mapped now (newest first), the unmapped
/// after it; `u` leaves the unmapped out.
#[test]
fn the_mmap_screen_leads_with_what_is_mapped_now() {
    use rdma_trace::tui::ui::shown_maps;
    let mut both = 0;
    // The companion in its teardown, its rings being unmapped one by one (cut at the third
    // of their six munmaps, 153.649684977 s into its boot), and whole runs.
    let third_unmap = |e: &rdma_trace::event::Event| e.ts_ns >= 153_649_684_977;
    let models = [
        ("companion-7.3.jsonl (teardown)", fed_until("companion-7.3.jsonl", third_unmap).model),
        ("perftest-rping-6.12.jsonl.zst", model("perftest-rping-6.12.jsonl.zst")),
        ("session-7.3.jsonl", model("session-7.3.jsonl")),
    ];
    for (capture, m) in models {
        let shown = shown_maps(&m, &Ui::default());
        let first_unmapped = shown.iter().position(|r| r.unmapped).unwrap_or(shown.len());
        assert!(
            shown[first_unmapped..].iter().all(|r| r.unmapped),
            "{capture}: mapped rows after unmapped ones"
        );
        let hidden = shown_maps(&m, &Ui { hide_unmapped: true, ..Default::default() });
        assert_eq!(hidden.len(), first_unmapped, "{capture}");
        assert!(hidden.iter().all(|r| !r.unmapped), "{capture}");
        both += usize::from(first_unmapped > 0 && first_unmapped < shown.len());
    }
    assert!(both > 0, "a capture with both mapped and unmapped rows was checked");
}

/// Issue 40: `e`'s answer is wrapped once, to the panel it is shown in (an 80-column
/// terminal's is 78 inside its borders): no prose line is longer, so none is wrapped again
/// into an orphan word.
#[test]
fn an_answer_is_wrapped_to_its_panel() {
    let mut f = fed("companion-7.3.jsonl");
    let ui = Ui { screen: Screen::Pinning, ..Default::default() };
    let (topic, anchor) = lesson::chosen(&f.model, &ui).unwrap();
    let m = f.model.clone();
    for width in [78u16, 60] {
        let text = lesson::answer(&mut f.engine, &lesson::Ask { id: 1, topic, anchor, width }, &m);
        let prose: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("   ") && !l.starts_with("    ") && !l.contains(" · "))
            .collect();
        assert!(prose.len() > 5, "{text}");
        for l in prose {
            assert!(l.chars().count() <= usize::from(width), "at {width}: {l:?}");
        }
    }
}

/// Issue 40: `/` searches every event the story keeps, not only the newest the Events
/// screen holds. In this capture ib_send_bw ran first: none of its events are among the
/// newest 2 000, all 4 002 are among the kept; `e` on a found one explains that one.
#[test]
fn a_filter_searches_every_event_the_story_keeps() {
    use rdma_trace::tui::ui::shown_events;
    let mut f = fed("perftest-rping-7.3.jsonl.zst");
    let ui = Ui { screen: Screen::Events, filter: "ib_send_bw".into(), ..Default::default() };
    assert!(f.model.events.iter().all(|e| e.comm != "ib_send_bw"), "the newest held are rping's");
    assert!(shown_events(&f.model, &ui).is_empty(), "before the search answers, the newest held");
    let kept = f.engine.kept().filter(|(_, e)| e.comm == "ib_send_bw").count();
    assert_eq!(kept, 4002);
    f.model.search(&f.engine, "ib_send_bw");
    let found = f.model.found.clone().unwrap();
    assert_eq!((found.matched, found.searched), (kept, f.engine.kept().count()));
    let shown = shown_events(&f.model, &ui);
    assert_eq!(shown.len(), 2000);
    assert!(shown.iter().all(|e| e.comm == "ib_send_bw"));
    let screen = render(&f.model, &ui, 120, 24);
    assert!(
        screen.contains(&format!(
            "events matching /ib_send_bw: 4002 of {} kept, the newest 2000",
            found.searched
        )),
        "{screen}"
    );
    // The newest found event on an explained path (a pin, a mapping, a completion).
    use rdma_trace::event::Path as P;
    let explained = shown.iter().position(|e| matches!(e.path, P::Pin | P::Mmap | P::Completion)).unwrap();
    let ui = Ui { selected: explained, ..ui };
    let (_, anchor) = lesson::chosen(&f.model, &ui).unwrap();
    assert_eq!(f.engine.event(anchor).unwrap().comm, "ib_send_bw");
}

/// Issue 40 item 7: on 6.1 soft-RoCE's completions run as tasklets (softirq): the
/// completion path says what that can mean and that `e` tells which, not "a worker".
#[test]
fn on_6_1_the_completion_path_says_softirq_and_points_to_e() {
    let m = model("companion-6.1.jsonl");
    let ui = Ui { screen: Screen::Completions, ..Default::default() };
    let screen = render(&m, &ui, 80, 24);
    assert!(screen.contains("softirq (a NIC's interrupt, or soft-RoCE's tasklet: e says which)"), "{screen}");
    assert!(!screen.contains("worker"), "{screen}");
}
