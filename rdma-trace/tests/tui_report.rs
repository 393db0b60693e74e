//! The TUI and `report` of one capture say the same numbers. On every lab capture, fed to
//! the TUI as a source feeds it (the live story with the viewer's bounds) and read by
//! `report` (its own story, the report's bounds): per CQ its owner, completions and wakeup
//! p50/p99; per process its MRs (live and in all), bytes pinned, refused pins and mappings;
//! per MR its range, pages, keys and state. Compared row by row with the model the screens
//! draw, and again in the Pinning and Completions screens as drawn. Nothing is left out: a
//! row in one and not the other fails.

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use rdma_trace::cli::ReadOpts;
use rdma_trace::output::report::Report;
use rdma_trace::sink::Sink;
use rdma_trace::source::capture::{Reader, open};
use rdma_trace::tui::format::{bytes, ns};
use rdma_trace::tui::model::{Model, ROWS};
use rdma_trace::tui::ui::{Screen, Ui};
use rdma_trace::tui::{self, screens};
use std::path::{Path, PathBuf};

fn captures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab");
    let mut all: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            (n.ends_with(".jsonl") || n.ends_with(".jsonl.zst")) && !n.contains(".steps.")
        })
        .collect();
    all.sort();
    all
}

fn model(capture: &Path) -> Model {
    let (mut f, _slot) = tui::channel(capture.display().to_string(), true);
    for r in Reader::new(open(capture).unwrap(), true) {
        f.record(r.unwrap()).unwrap();
    }
    f.caught_up();
    f.model
}

fn report(capture: &Path) -> Report {
    let opts = ReadOpts { strict: true, follow: false };
    rdma_trace::cmd::report::build(&[capture.to_path_buf()], opts).unwrap()
}

fn render(m: &Model, screen: Screen, w: u16, h: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| screens::draw(f, m, &Ui { screen, ..Default::default() })).unwrap();
    t.backend().to_string()
}

/// The drawn table under the header naming `columns` (in order): each row's cells, cut
/// at the columns' starts.
fn table(screen: &str, columns: &[&str]) -> Vec<Vec<String>> {
    let lines: Vec<Vec<char>> = screen.lines().map(|l| l.trim_matches('"').chars().collect()).collect();
    let starts = |l: &Vec<char>| -> Option<Vec<usize>> {
        let text: String = l.iter().collect();
        let mut at = Vec::new();
        let mut from = 0;
        for c in columns {
            let byte = from + text[from..].find(&format!("{c} ")).or_else(|| text[from..].find(c))?;
            at.push(text[..byte].chars().count());
            from = byte + c.len();
        }
        Some(at)
    };
    let Some((head, at)) = lines.iter().enumerate().find_map(|(i, l)| starts(l).map(|a| (i, a))) else {
        return Vec::new();
    };
    lines[head + 1..]
        .iter()
        .take_while(|l| l.first() == Some(&'│'))
        .map(|l| {
            let end = l.len() - 1;
            (0..at.len())
                .map(|k| {
                    let (a, b) = (at[k], at.get(k + 1).copied().unwrap_or(end).min(end));
                    l[a.min(b)..b].iter().collect::<String>().trim().to_string()
                })
                .collect()
        })
        .filter(|cells: &Vec<String>| cells.iter().any(|c| !c.is_empty()))
        .collect()
}

fn key(k: Option<u64>) -> String {
    k.map_or("-".into(), |k| format!("{k:#x}"))
}

#[test]
fn every_number_the_tui_shows_is_the_reports_on_every_lab_capture() {
    let all = captures();
    assert!(all.len() >= 13, "the lab captures: {all:?}");
    let (mut cqs, mut mrs, mut procs) = (0, 0, 0);
    for c in &all {
        let name = c.file_name().unwrap().to_string_lossy().to_string();
        let (m, r) = (model(c), report(c));

        // Per CQ: the same CQs, owners, completions and wakeup quantiles.
        let have: Vec<u64> = m.cqs.keys().copied().collect();
        let want: Vec<u64> = r.cqs.iter().map(|q| q.handle).collect();
        assert_eq!(have, want, "{name}: the CQs");
        let tall = 2 * (r.cqs.len() as u16 + 8);
        let drawn = render(&m, Screen::Completions, 200, tall);
        let rows = table(&drawn, &["CQ", "owner", "events", "ran in", "wake p50", "p99"]);
        for q in &r.cqs {
            let row = &m.cqs[&q.handle];
            let pid = row.cq.pid.map(|t| t.pid);
            assert_eq!(
                (pid, row.comm.as_str()),
                (q.pid, q.comm.as_str()),
                "{name}: CQ {:#x}'s owner",
                q.handle
            );
            assert_eq!(row.cq.completions, q.completions, "{name}: CQ {:#x}'s completions", q.handle);
            let quantiles = (row.cq.wakeup_ns.quantile(0.5), row.cq.wakeup_ns.quantile(0.99));
            assert_eq!(quantiles, (q.wakeup_p50_ns, q.wakeup_p99_ns), "{name}: CQ {:#x}'s wakeups", q.handle);
            let cells = rows
                .iter()
                .find(|r| r[0] == format!("{:#x}", q.handle))
                .unwrap_or_else(|| panic!("{name}: CQ {:#x} not drawn:\n{drawn}", q.handle));
            let owner = q.pid.map_or("unknown".into(), |p| format!("{p} {}", q.comm));
            let shown = [owner, q.completions.to_string(), ns(q.wakeup_p50_ns), ns(q.wakeup_p99_ns)];
            let drawn_cells = [&cells[1], &cells[2], &cells[4], &cells[5]];
            assert_eq!(
                drawn_cells.map(String::as_str),
                shown.each_ref().map(String::as_str),
                "{name}: CQ {:#x} as drawn",
                q.handle
            );
            cqs += 1;
        }

        // Per process: every process the TUI keeps a row for is the report's, and back.
        let have: Vec<u32> = m.procs.keys().map(|t| t.pid).collect();
        let want: Vec<u32> =
            r.processes.iter().filter(|p| p.mrs + p.refused_pins + p.mappings > 0).map(|p| p.pid).collect();
        assert_eq!(have, want, "{name}: the processes");
        let task = |pid: u32| rdma_trace::event::Task::new(0, pid);
        for p in r.processes.iter().filter(|p| m.procs.contains_key(&task(p.pid))) {
            let row = &m.procs[&task(p.pid)];
            let tui = (row.mrs_total, row.mrs_live, row.pinned, row.refused, row.mappings);
            let rep = (p.mrs, p.mrs_live, p.pinned_bytes, p.refused_pins, p.mappings);
            assert_eq!(tui, rep, "{name}: pid {} (MRs, live, pinned bytes, refused, mappings)", p.pid);
            let limit = if p.memlock_unlimited { Some(u64::MAX) } else { p.memlock_limit_bytes };
            assert_eq!(row.memlock_limit, limit, "{name}: pid {}'s memlock limit", p.pid);
            procs += 1;
        }

        // Per MR: the same MRs, pages, keys and state, in the model and on the screen.
        assert!(r.mrs.len() <= ROWS, "{name}: more MRs than the Pinning screen keeps");
        let mut have: Vec<(u32, u64, u64)> = m.mrs.iter().map(|x| (x.pid.pid, x.addr, x.length)).collect();
        let mut want: Vec<(u32, u64, u64)> = r.mrs.iter().map(|x| (x.pid, x.addr, x.length)).collect();
        have.sort_unstable();
        want.sort_unstable();
        assert_eq!(have, want, "{name}: the MRs");
        let drawn = render(&m, Screen::Pinning, 250, r.mrs.len() as u16 + 8);
        let cols = ["process", "addr", "len", "pages", "access", "pin", "lkey", "rkey", "state"];
        let rows = table(&drawn, &cols);
        for x in &r.mrs {
            let row =
                m.mrs.iter().find(|y| (y.pid.pid, y.addr, y.length) == (x.pid, x.addr, x.length)).unwrap();
            let state = match (row.refused, row.live) {
                (Some(_), _) => "refused",
                (None, true) => "live",
                (None, false) => "deregistered",
            };
            let tui = (row.pages, row.lkey, row.rkey, state, row.kind.brief());
            assert_eq!(
                tui,
                (x.pages, x.lkey, x.rkey, x.state.as_str(), x.kind.clone()),
                "{name}: MR {:#x}",
                x.addr
            );
            if x.from_tables {
                continue; // drawn as "(rdma res)": its keys are checked on the model above
            }
            let cells = rows
                .iter()
                .find(|r| r[1] == format!("{:#x}", x.addr) && r[0].starts_with(&format!("{} ", x.pid)))
                .unwrap_or_else(|| panic!("{name}: MR {:#x} not drawn:\n{drawn}", x.addr));
            let pages = x.pages.map_or("-".into(), |p| p.to_string());
            let shown = [bytes(x.length), pages, key(x.lkey), key(x.rkey)];
            let drawn_cells = [&cells[2], &cells[3], &cells[6], &cells[7]];
            assert_eq!(
                drawn_cells.map(String::as_str),
                shown.each_ref().map(String::as_str),
                "{name}: MR {:#x} as drawn",
                x.addr
            );
            let word = match x.state.as_str() {
                "refused" => "REFUSED",
                "live" => "live",
                _ => "dereg",
            };
            assert!(cells[8].starts_with(word), "{name}: MR {:#x} not {word}: {cells:?}", x.addr);
            mrs += 1;
        }
    }
    // Every kind of row was compared (the captures hold all three).
    assert!(cqs > 20 && mrs > 30 && procs > 20, "compared {cqs} CQs, {mrs} MRs, {procs} processes");
}

/// Issue 40: one count per thing. On every lab capture the event records in the file are
/// the TUI's events, the report's events read and the story's (whose parts, the processes
/// shown, the kernel threads and the unjoined, add up to it); the completion events are
/// the same in the report's completion path, its CQs, `diff`'s two metrics, the story's CQs
/// and the TUI's.
#[test]
fn every_view_counts_the_same_events_and_completions() {
    use rdma_trace::capture::Record;
    use rdma_trace::pipeline::correlate::engine::{Engine, Limits};
    let mut steps_compared = 0;
    for c in &captures() {
        let name = c.file_name().unwrap().to_string_lossy().to_string();
        let mut live = Engine::new(Vec::new(), Limits::default());
        let mut events = 0u64;
        // A late joiner's capture begins with a daemon's state: what its CQs completed
        // before (counted by the CQs, not by the completion path's events).
        let mut before = 0u64;
        for r in Reader::new(open(c).unwrap(), true) {
            match r.unwrap() {
                Record::Event(e) => {
                    events += 1;
                    live.push(e);
                }
                Record::State(st) => {
                    before += st.cqs.iter().map(|q| q.completions).sum::<u64>();
                    live.seed(&st);
                }
                Record::Step(s) => live.add_steps(vec![s.step]),
                _ => {}
            }
        }
        let (story, kept, steps) = live.finish();
        let (m, r) = (model(c), report(c));

        assert_eq!(m.events_total, events, "{name}: the TUI's events");
        assert_eq!(r.captures[0].events, events, "{name}: the report's events read");
        assert_eq!(story.events_total, events, "{name}: the story's events");
        let placed: u64 = story.processes.values().map(|p| p.event_count).sum::<u64>()
            + story.unjoined_total
            + story.retired_events;
        assert_eq!(placed, events, "{name}: the story's parts add up");
        let text = rdma_trace::output::story::text(&story, &kept, &steps);
        assert!(text.starts_with(&format!("{events} events: ")), "{name}: {}", text.lines().next().unwrap());
        let numbers = rdma_trace::output::report::text(&r);
        assert!(
            numbers.contains(&format!(" {events} events")),
            "{name}: {}",
            numbers.lines().next().unwrap()
        );
        let status = render(&m, Screen::Overview, 200, 24);
        assert!(status.lines().last().unwrap().contains(&format!("│ {events} ev ")), "{name}: {status}");

        // Each companion step's kernel events: the story's lines and the Steps screen's.
        let mut told: Vec<(u32, usize)> = text
            .lines()
            .filter_map(|l| {
                let mut w = l.strip_prefix("  step ")?.split_whitespace();
                let (step, _name, k) = (w.next()?.parse().ok()?, w.next()?, w.next()?.parse().ok()?);
                (w.next()? == "kernel").then_some((step, k))
            })
            .collect();
        let mut shown: Vec<(u32, usize)> = m.steps.iter().map(|s| (s.step, s.kernel)).collect();
        if told.len() == shown.len() {
            told.sort();
            shown.sort();
            assert_eq!(shown, told, "{name}: each step's kernel events");
            steps_compared += told.len();
        }

        let path = r.paths.get("completion").map_or(0, |p| p.events);
        let metrics = rdma_trace::output::diff::metrics(&r);
        let counts = [
            ("report's CQs", r.cqs.iter().map(|q| q.completions).sum::<u64>(), before),
            ("diff completions", metrics["completions"].unwrap() as u64, before),
            (
                "diff completion-events",
                metrics.get("completion-events").copied().flatten().unwrap_or(0.0) as u64,
                0,
            ),
            ("story's CQs", story.cqs.values().map(|q| q.completions).sum(), before),
            ("TUI's CQs", m.cqs.values().map(|q| q.cq.completions).sum(), before),
        ];
        for (what, n, before) in counts {
            assert_eq!(
                n,
                path + before,
                "{name}: {what} against the report's completion path (+ {before} before)"
            );
        }
    }
    eprintln!("steps compared: {steps_compared}");
    assert!(steps_compared >= 100, "steps compared: {steps_compared}");
}
