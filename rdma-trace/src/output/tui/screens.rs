//! Drawing: a pure function of the model and the UI state (tested with ratatui's
//! TestBackend and insta snapshots on lab captures).

use super::model::{CqRow, Model, Samples};
use crate::pipeline::render;
use crate::plan::catalog::Render;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Clear, Gauge, Paragraph, Row, Sparkline, Table, TableState, Tabs, Wrap};

pub const SCREENS: [&str; 6] = ["Overview", "Pinning", "Mmap", "Completions", "Events", "Steps"];

/// What the person looking has chosen: the screen, the selected row, a filter, pause.
#[derive(Clone, Debug, Default)]
pub struct Ui {
    pub screen: usize,
    pub selected: usize,
    /// Rows whose pid, comm or object (lkey, rkey, CQ handle) contain it.
    pub filter: String,
    pub editing_filter: bool,
    pub help: bool,
    pub paused: bool,
    /// Replay speed ×10 (10 = real time), for the status line.
    pub speed_x10: Option<u32>,
    /// The explanation open over the screen (`e`), and how far it is scrolled.
    pub explain: Option<String>,
    pub explain_scroll: u16,
}

fn ns(v: Option<u64>) -> String {
    match v {
        None => "-".into(),
        Some(n) if n >= 1_000_000 => format!("{:.1}ms", n as f64 / 1e6),
        Some(n) => format!("{:.0}µs", n as f64 / 1e3),
    }
}

fn bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{:.1}G", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1}M", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{}K", b >> 10),
        b => format!("{b}B"),
    }
}

fn p50_p99(s: &Samples) -> String {
    format!("p50 {} p99 {}", ns(s.quantile(0.5)), ns(s.quantile(0.99)))
}

fn matches(ui: &Ui, fields: &[String]) -> bool {
    ui.filter.is_empty() || fields.iter().any(|f| f.contains(&ui.filter))
}

pub fn draw(f: &mut Frame, m: &Model, ui: &Ui) {
    let [tabs, body, status] =
        Layout::vertical([Constraint::Length(1), Constraint::Min(0), Constraint::Length(1)]).areas(f.area());
    let titles: Vec<String> = SCREENS.iter().enumerate().map(|(i, s)| format!("{} {s}", i + 1)).collect();
    f.render_widget(
        Tabs::new(titles).select(ui.screen).highlight_style(Style::new().add_modifier(Modifier::REVERSED)),
        tabs,
    );
    match ui.screen {
        0 => overview(f, body, m),
        1 => pinning(f, body, m, ui),
        2 => mmap(f, body, m, ui),
        3 => completions(f, body, m, ui),
        4 => events(f, body, m, ui),
        _ => steps(f, body, m, ui),
    }
    status_line(f, status, m, ui);
    if let Some(text) = &ui.explain {
        super::lesson::draw(f, body, text, ui.explain_scroll);
    }
    if ui.help {
        help(f, body);
    }
}

fn status_line(f: &mut Frame, area: Rect, m: &Model, ui: &Ui) {
    let mut spans = vec![Span::raw(m.source.clone())];
    if let Some((at, of)) = m.position {
        spans.push(Span::raw(if of > 0 { format!(" {at}/{of}") } else { format!(" @{at}") }));
    }
    if let Some(done) = &m.finished {
        spans.push(Span::styled(format!(" ({done})"), Style::new().add_modifier(Modifier::BOLD)));
    }
    if ui.paused {
        spans.push(Span::styled(" PAUSED", Style::new().add_modifier(Modifier::BOLD)));
    }
    if let Some(s) = ui.speed_x10 {
        spans.push(Span::raw(format!(" ×{}", s as f64 / 10.0)));
    }
    let lost = Span::styled(
        format!("{} lost", m.lost_total),
        if m.lost_total > 0 {
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)
        } else {
            Style::new()
        },
    );
    spans.push(Span::raw(format!(" │ {} ev {:.0}/s │ ", m.events_total, m.rate)));
    spans.push(lost);
    if m.not_sent > 0 {
        spans.push(Span::styled(
            format!(" +{} not sent to this view", m.not_sent),
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        ));
    }
    spans.push(Span::raw(format!(" │ {} probes ({} skipped)", m.attached, m.skipped)));
    if ui.editing_filter || !ui.filter.is_empty() {
        spans.push(Span::raw(format!(" │ /{}", ui.filter)));
    }
    spans.push(Span::raw(" │ ? help"));
    f.render_widget(Paragraph::new(Line::from(spans)), area);
}

/// Panels narrower than this put each label's parts on lines of their own (80×24).
const NARROW: u16 = 40;

/// `a` then `b` on one line, or on two when the panel is narrow.
fn lines_of(narrow: bool, a: String, b: String) -> Vec<Line<'static>> {
    let b_alone = b.trim_start_matches([':', ' ']);
    if narrow { vec![Line::from(a), Line::from(format!(" {b_alone}"))] } else { vec![Line::from(a + &b)] }
}

fn overview(f: &mut Frame, area: Rect, m: &Model) {
    let [pin, map, comp] = Layout::horizontal([Constraint::Ratio(1, 3); 3]).areas(area);
    overview_pinning(f, pin, m);
    overview_mmap(f, map, m);
    overview_completions(f, comp, m);
}

/// A gauge per process (pinned against its memlock limit), then pin latency.
fn overview_pinning(f: &mut Frame, pin: Rect, m: &Model) {
    let block = Block::bordered().title("Pinning");
    let inner = block.inner(pin);
    f.render_widget(block, pin);
    let narrow = inner.width < NARROW;
    let label_rows = if narrow { 2 } else { 1 };
    let procs: Vec<_> = m.procs.values().filter(|p| p.mrs_total > 0 || p.refused > 0).collect();
    let mut rows = Vec::new();
    for _ in &procs {
        rows.push(Constraint::Length(label_rows + 1));
    }
    rows.push(Constraint::Length(2));
    rows.push(Constraint::Min(0));
    let parts = Layout::vertical(rows).split(inner);
    for (i, p) in procs.iter().enumerate() {
        let [label, bar] =
            Layout::vertical([Constraint::Length(label_rows), Constraint::Length(1)]).areas(parts[i]);
        let refused = if p.refused > 0 { format!(", {} refused", p.refused) } else { String::new() };
        f.render_widget(
            Paragraph::new(lines_of(
                narrow,
                format!("{} [{}]", render::printable(&p.comm), p.pid),
                format!(" {} live/{} MRs{refused}", p.mrs_live, p.mrs_total),
            )),
            label,
        );
        let (ratio, text) = match p.memlock_limit {
            Some(l) if l != u64::MAX && l > 0 => (
                (p.pinned as f64 / l as f64).min(1.0),
                format!("{} of {} memlock", bytes(p.pinned), bytes(l)),
            ),
            _ if narrow => (0.0, format!("{} (no limit)", bytes(p.pinned))),
            _ => (0.0, format!("{} (memlock unlimited)", bytes(p.pinned))),
        };
        f.render_widget(
            Gauge::default().ratio(ratio).label(text).gauge_style(Style::new().fg(Color::Cyan)),
            bar,
        );
    }
    let n = procs.len();
    let (p50, p99) = (ns(m.pin_ns.quantile(0.5)), ns(m.pin_ns.quantile(0.99)));
    let latency = if narrow {
        vec![Line::from(format!("pin p50 {p50}")), Line::from(format!("    p99 {p99}"))]
    } else {
        vec![Line::from(format!("pin latency p50 {p50} p99 {p99}"))]
    };
    f.render_widget(Paragraph::new(latency), parts[n]);
    let spark: Vec<u64> = m.pin_ns.0.iter().rev().take(inner.width as usize).rev().copied().collect();
    f.render_widget(Sparkline::default().data(&spark), parts[n + 1]);
}

/// Mappings per process and what they map.
fn overview_mmap(f: &mut Frame, map: Rect, m: &Model) {
    let narrow = map.width.saturating_sub(2) < NARROW;
    let mut lines = Vec::new();
    for p in m.procs.values().filter(|p| p.mappings > 0) {
        lines.extend(lines_of(
            narrow,
            format!("{} [{}]", render::printable(&p.comm), p.pid),
            format!(": {} mappings", p.mappings),
        ));
        let mut kinds: std::collections::BTreeMap<&str, u64> = Default::default();
        for r in m.maps.iter().filter(|r| r.pid == p.pid) {
            *kinds.entry(r.kind.as_str()).or_default() += 1;
        }
        for (k, c) in kinds {
            lines.push(Line::from(format!("  {c} × {k}")));
        }
    }
    f.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: false }).block(Block::bordered().title("Mmap")),
        map,
    );
}

/// Per CQ a rate sparkline, the context, wakeup latency.
fn overview_completions(f: &mut Frame, comp: Rect, m: &Model) {
    let block = Block::bordered().title("Completions");
    let inner = block.inner(comp);
    f.render_widget(block, comp);
    let narrow = inner.width < NARROW;
    let label_rows = if narrow { 4 } else { 2 };
    let cqs: Vec<&CqRow> = m.cqs.values().collect();
    let parts =
        Layout::vertical(cqs.iter().map(|_| Constraint::Length(label_rows + 1)).chain([Constraint::Min(0)]))
            .split(inner);
    for (i, c) in cqs.iter().enumerate() {
        let [label, spark] =
            Layout::vertical([Constraint::Length(label_rows), Constraint::Length(1)]).areas(parts[i]);
        let ctx: Vec<String> = c.by_context.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let mut lines = lines_of(
            narrow,
            format!("CQ {:#x}", c.handle),
            format!(" {} [{}]", render::printable(&c.comm), c.pid.unwrap_or(0)),
        );
        lines.extend(lines_of(
            narrow,
            format!(" {} ({})", c.completions, ctx.join(", ")),
            format!(" wake {}", p50_p99(&c.wakeup_ns)),
        ));
        f.render_widget(Paragraph::new(lines), label);
        let data: Vec<u64> = c.per_second.iter().copied().collect();
        f.render_widget(Sparkline::default().data(&data).style(Style::new().fg(Color::Green)), spark);
    }
}

/// A table with a bold header, the selected row reversed, in a titled box.
fn table<'a, const N: usize>(
    rows: Vec<Row<'a>>,
    widths: [Constraint; N],
    header: [&'a str; N],
    title: impl Into<Line<'a>>,
) -> Table<'a> {
    Table::new(rows, widths)
        .header(Row::new(header).style(Style::new().add_modifier(Modifier::BOLD)))
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
        .block(Block::bordered().title(title))
}

fn table_state(ui: &Ui, len: usize) -> TableState {
    TableState::default().with_selected(if len == 0 { None } else { Some(ui.selected.min(len - 1)) })
}

fn pinning(f: &mut Frame, area: Rect, m: &Model, ui: &Ui) {
    let rows: Vec<Row> = m
        .mrs
        .iter()
        .rev()
        .filter(|r| {
            matches(
                ui,
                &[
                    r.pid.to_string(),
                    r.comm.clone(),
                    r.lkey.map(|k| format!("{k:#x}")).unwrap_or_default(),
                    r.rkey.map(|k| format!("{k:#x}")).unwrap_or_default(),
                ],
            )
        })
        .map(|r| {
            let state = match (r.refused, r.live) {
                (Some(errno), _) => {
                    let why = if errno == 12 {
                        format!(
                            "REFUSED ENOMEM: {} asked, memlock {}",
                            bytes(r.length),
                            r.memlock_limit.map(bytes).unwrap_or("?".into())
                        )
                    } else {
                        format!("REFUSED {}", render::errno_name(errno))
                    };
                    Cell::from(why).style(Style::new().fg(Color::Red))
                }
                (None, true) => Cell::from("live"),
                (None, false) => Cell::from("dereg"),
            };
            Row::new(vec![
                Cell::from(format!("{} {}", r.pid, render::printable(&r.comm))),
                Cell::from(if r.from_tables() { "(rdma res)".to_string() } else { format!("{:#x}", r.addr) }),
                Cell::from(bytes(r.length)),
                Cell::from(r.pages.map(|p| p.to_string()).unwrap_or("-".into())),
                Cell::from(
                    r.access
                        .map(|a| render::text(Render::Access, crate::event::Value::U(a)))
                        .unwrap_or_default(),
                ),
                Cell::from(ns(r.latency_ns)),
                Cell::from(r.lkey.map(|k| format!("{k:#x}")).unwrap_or("-".into())),
                Cell::from(r.rkey.map(|k| format!("{k:#x}")).unwrap_or("-".into())),
                state,
            ])
        })
        .collect();
    let n = rows.len();
    let t = table(
        rows,
        [
            Constraint::Length(18),
            Constraint::Length(15),
            Constraint::Length(6),
            Constraint::Length(5),
            Constraint::Length(14),
            Constraint::Length(7),
            Constraint::Length(7),
            Constraint::Length(7),
            Constraint::Min(5),
        ],
        ["process", "addr", "len", "pages", "access", "pin", "lkey", "rkey", "state"],
        format!("MRs ({n}, newest first)"),
    );
    f.render_stateful_widget(t, area, &mut table_state(ui, n));
}

fn mmap(f: &mut Frame, area: Rect, m: &Model, ui: &Ui) {
    let rows: Vec<Row> = m
        .maps
        .iter()
        .rev()
        .filter(|r| matches(ui, &[r.pid.to_string(), r.comm.clone()]))
        .map(|r| {
            Row::new(vec![
                format!("{} {}", r.pid, render::printable(&r.comm)),
                format!("{:#x}", r.start),
                bytes(r.end.saturating_sub(r.start)),
                r.kind.clone(),
                r.cache.clone().unwrap_or("-".into()),
                r.call.clone().unwrap_or("-".into()),
            ])
        })
        .collect();
    let n = rows.len();
    let t = table(
        rows,
        [
            Constraint::Length(18),
            Constraint::Length(15),
            Constraint::Length(6),
            Constraint::Min(20),
            Constraint::Length(14),
            Constraint::Length(16),
        ],
        ["process", "start", "size", "maps", "cache", "made by"],
        format!("uverbs mappings ({n})"),
    );
    f.render_stateful_widget(t, area, &mut table_state(ui, n));
}

fn completions(f: &mut Frame, area: Rect, m: &Model, ui: &Ui) {
    let cqs: Vec<&CqRow> = m
        .cqs
        .values()
        .filter(|c| {
            matches(ui, &[format!("{:#x}", c.handle), c.comm.clone(), c.pid.unwrap_or(0).to_string()])
        })
        .collect();
    let [list, chain] =
        Layout::vertical([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(area);
    let rows: Vec<Row> = cqs
        .iter()
        .map(|c| {
            let ctx: Vec<String> = c.by_context.iter().map(|(k, v)| format!("{k} {v}")).collect();
            Row::new(vec![
                format!("{:#x}", c.handle),
                format!("{} {}", c.pid.unwrap_or(0), render::printable(&c.comm)),
                c.completions.to_string(),
                ctx.join(" "),
                ns(c.wakeup_ns.quantile(0.5)),
                ns(c.wakeup_ns.quantile(0.99)),
            ])
        })
        .collect();
    let n = rows.len();
    let t = table(
        rows,
        [
            Constraint::Length(16),
            Constraint::Length(20),
            Constraint::Length(7),
            Constraint::Min(12),
            Constraint::Length(8),
            Constraint::Length(8),
        ],
        ["CQ", "owner", "events", "ran in", "wake p50", "p99"],
        "CQs",
    );
    f.render_stateful_widget(t, list, &mut table_state(ui, n));
    let Some(c) = cqs.get(ui.selected.min(n.saturating_sub(1))) else {
        f.render_widget(Paragraph::new("no completion events yet").block(Block::bordered()), chain);
        return;
    };
    let ctx = c.by_context.keys().cloned().collect::<Vec<_>>().join("/");
    let lines = vec![
        Line::from(format!("{ctx} (the NIC's interrupt, or soft-RoCE's worker)")),
        Line::from(format!("  └─ ib_uverbs_comp_handler          {}", p50_p99(&c.handler_ns))),
        Line::from(format!("       └─ channel read returns      +{}", p50_p99(&c.wakeup_ns))),
        Line::from(format!("            └─ ibv_get_cq_event      +{}", p50_p99(&c.library_ns))),
        Line::from(""),
        Line::from(format!("wakeup latency over {} completions:", c.wakeup_ns.0.len())),
    ];
    let [text, hist] =
        Layout::vertical([Constraint::Length(6), Constraint::Min(0)]).areas(Block::bordered().inner(chain));
    f.render_widget(Block::bordered().title(format!("completion path of CQ {:#x}", c.handle)), chain);
    f.render_widget(Paragraph::new(lines), text);
    let buckets = histogram(&c.wakeup_ns, hist.width as usize);
    f.render_widget(Sparkline::default().data(&buckets).style(Style::new().fg(Color::Yellow)), hist);
}

/// Samples in `n` buckets between their minimum and maximum (a histogram for a sparkline).
fn histogram(s: &Samples, n: usize) -> Vec<u64> {
    let (Some(lo), Some(hi)) = (s.0.iter().min(), s.0.iter().max()) else { return Vec::new() };
    let n = n.max(1);
    let width = (hi - lo) / n as u64 + 1;
    let mut out = vec![0; n];
    for v in &s.0 {
        out[(((v - lo) / width) as usize).min(n - 1)] += 1;
    }
    out
}

/// The events the Events screen lists, newest first, filtered.
pub fn shown_events<'a>(m: &'a Model, ui: &Ui) -> Vec<&'a crate::event::Event> {
    m.events
        .iter()
        .rev()
        .filter(|e| matches(ui, &[e.pid.to_string(), e.comm.clone(), crate::output::text::fields_text(e)]))
        .collect()
}

fn events(f: &mut Frame, area: Rect, m: &Model, ui: &Ui) {
    let shown = shown_events(m, ui);
    let [list, detail] =
        Layout::vertical([Constraint::Percentage(60), Constraint::Percentage(40)]).areas(area);
    let rows: Vec<Row> = shown.iter().map(|e| Row::new(vec![crate::output::text::line(e)])).collect();
    let n = rows.len();
    let t = Table::new(rows, [Constraint::Min(10)])
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
        .block(Block::bordered().title(format!("events ({n} kept, newest first)")));
    f.render_stateful_widget(t, list, &mut table_state(ui, n));
    let Some(e) = shown.get(ui.selected.min(n.saturating_sub(1))) else { return };
    let mut lines =
        vec![Line::from(format!("{} {:?} in {} [{}]", e.name, e.kind, render::printable(&e.comm), e.pid))];
    lines.extend(
        e.fields.iter().map(|(k, v)| Line::from(format!("  {k} = {}", render::text(e.render_of(k), *v)))),
    );
    for frame in &e.stack {
        let note = crate::plan::frames::frame(frame).map(|n| format!("   ← {n}")).unwrap_or_default();
        lines.push(Line::from(format!("  {frame}{note}")));
    }
    f.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: false }).block(Block::bordered().title("detail")),
        detail,
    );
}

/// The companion's steps, newest first; the selected one's events and checks below.
fn steps(f: &mut Frame, area: Rect, m: &Model, ui: &Ui) {
    let shown: Vec<&super::model::StepRow> =
        m.steps.iter().rev().filter(|s| matches(ui, &[s.pid.to_string(), s.name.clone()])).collect();
    let [list, detail] =
        Layout::vertical([Constraint::Percentage(55), Constraint::Percentage(45)]).areas(area);
    let rows: Vec<Row> = shown
        .iter()
        .map(|s| {
            let failed = s.checks.iter().filter(|c| !c.ok).count();
            let checks = match (s.checks.len(), failed) {
                (0, _) => Cell::from("-"),
                (n, 0) => Cell::from(format!("{n} ✓")).style(Style::new().fg(Color::Green)),
                (n, k) => Cell::from(format!("{k}/{n} ✗")).style(Style::new().fg(Color::Red)),
            };
            let how = match (&s.ok, &s.error) {
                (true, _) => Cell::from("ok"),
                (false, e) => Cell::from(format!("FAILED {}", e.as_deref().unwrap_or("")))
                    .style(Style::new().fg(Color::Red)),
            };
            Row::new(vec![
                Cell::from(s.pid.to_string()),
                Cell::from(format!("{}.{}", s.run, s.step)),
                Cell::from(s.name.clone()),
                Cell::from(ns(Some(s.took_ns))),
                Cell::from(s.events.len().to_string()),
                checks,
                how,
            ])
        })
        .collect();
    let n = rows.len();
    let t = table(
        rows,
        [
            Constraint::Length(7),
            Constraint::Length(6),
            Constraint::Min(14),
            Constraint::Length(8),
            Constraint::Length(6),
            Constraint::Length(7),
            Constraint::Length(14),
        ],
        ["pid", "step", "name", "took", "events", "checks", "result"],
        format!("companion steps ({n}, newest first)"),
    );
    f.render_stateful_widget(t, list, &mut table_state(ui, n));
    let Some(s) = shown.get(ui.selected.min(n.saturating_sub(1))) else {
        let hint = "No steps yet: they come from rdma-trace-workload (its rdma_trace_step marker).";
        f.render_widget(Paragraph::new(hint).wrap(Wrap { trim: true }).block(Block::bordered()), detail);
        return;
    };
    let mut lines: Vec<Line> = s
        .checks
        .iter()
        .map(|c| {
            let (mark, colour) = if c.ok { ("✓", Color::Green) } else { ("✗", Color::Red) };
            Line::from(vec![
                Span::styled(format!("{mark} "), Style::new().fg(colour)),
                Span::raw(format!("{}: step {} kernel {}", c.what, c.step, c.kernel)),
            ])
        })
        .collect();
    lines.extend(s.events.iter().map(|e| Line::from(e.clone())));
    let title = format!("{} (pid {} thread {}): {} events", s.name, s.pid, s.tid, s.events.len());
    f.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: false }).block(Block::bordered().title(title)),
        detail,
    );
}

fn help(f: &mut Frame, area: Rect) {
    let w = area.width.min(60);
    let h = area.height.min(13);
    let r = Rect { x: area.x + (area.width - w) / 2, y: area.y + (area.height - h) / 2, width: w, height: h };
    f.render_widget(Clear, r);
    f.render_widget(
        Paragraph::new(vec![
            Line::from("tab / 1-6   switch screens"),
            Line::from("↑↓ j k      select a row"),
            Line::from("/           filter by pid, comm, lkey, rkey, CQ"),
            Line::from("space       pause (a replay stops; live keeps counting)"),
            Line::from("+ -         replay speed ×0.1 … ×100"),
            Line::from("n           step one event (paused replay)"),
            Line::from("e           explain the selected event's path (Events)"),
            Line::from("g G         replay from the start / to the end"),
            Line::from("q           quit"),
        ])
        .block(Block::bordered().title("keys")),
        r,
    );
}
