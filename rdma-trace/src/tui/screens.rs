//! Drawing: a pure function of the model and the UI state (tested with ratatui's
//! TestBackend and insta snapshots on lab captures).

use super::fit::{self, Col, Text};
use super::format::{bytes, ns, titled};
use super::model::{Model, MrRow, Samples};
use super::ui::{Mode, Screen, Ui, shown_cqs, shown_events, shown_maps, shown_mrs, shown_steps};
use crate::pipeline::render;
use crate::plan::catalog::Render;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Clear, Paragraph, Row, Sparkline, Table, TableState, Tabs, Wrap};

fn p50_p99(s: &Samples) -> String {
    let of = if s.windowed() { format!(" of the last {}", s.0.len()) } else { String::new() };
    format!("p50 {} p99 {}{of}", ns(s.quantile(0.5)), ns(s.quantile(0.99)))
}

/// Draws the screen `ui` shows of `m`.
pub fn draw(f: &mut Frame, m: &Model, ui: &Ui) {
    let [tabs, body, status] =
        Layout::vertical([Constraint::Length(1), Constraint::Min(0), Constraint::Length(1)]).areas(f.area());
    let names = Screen::ALL.map(Screen::name);
    let titles = fit::tabs(&names, ui.screen.index(), tabs.width);
    f.render_widget(
        Tabs::new(titles)
            .select(ui.screen.index())
            .highlight_style(Style::new().add_modifier(Modifier::REVERSED)),
        tabs,
    );
    match ui.screen {
        Screen::Overview => super::overview::draw(f, body, m),
        Screen::Pinning => pinning(f, body, m, ui),
        Screen::Mmap => mmap(f, body, m, ui),
        Screen::Completions => completions(f, body, m, ui),
        Screen::Events => events(f, body, m, ui),
        Screen::Steps => steps(f, body, m, ui),
    }
    status_line(f, status, m, ui);
    match ui.mode.base() {
        Mode::Text(p) => {
            let title = p.title.as_deref().unwrap_or(super::lesson::TITLE);
            super::lesson::draw(f, body, title, &p.text, p.scroll);
        }
        Mode::Loss => super::lesson::draw(f, body, LOSS_TITLE, &m.loss_lines().join("\n"), 0),
        Mode::Normal | Mode::Filter | Mode::Help(_) => {}
    }
    if matches!(ui.mode, Mode::Help(_)) {
        help(f, body);
    }
}

/// A part of the status line, and the ranks at which it gives way (to a shorter form,
/// or to nothing).
type Part = (Span<'static>, Vec<(u8, Option<Span<'static>>)>);

/// One line: where the events come from, how many, what was lost, the probes, the keys.
/// When it is too wide, parts give way in this order: the source is shortened (a path
/// keeps its end), the probe count is compacted (skipped probes stay), the replay speed
/// and position go, the event rate goes, the source goes, then the probe count. What was
/// lost, "PAUSED", the filter being typed and the help key always stay.
fn status_line(f: &mut Frame, area: Rect, m: &Model, ui: &Ui) {
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let red = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
    let mut parts: Vec<Part> = Vec::new();
    let source = m.source.clone();
    parts.push((Span::raw(source.clone()), vec![(6, None)]));
    if let Some((at, of)) = m.position {
        let at = if of > 0 { format!(" {at}/{of}") } else { format!(" @{at}") };
        parts.push((Span::raw(at), vec![(4, None)]));
    }
    if let Some(done) = &m.finished {
        parts.push((Span::styled(format!(" ({done})"), bold), vec![(7, None)]));
    }
    if ui.paused {
        parts.push((Span::styled(" PAUSED", bold), vec![]));
    }
    if let Some(s) = ui.speed_x10 {
        parts.push((Span::raw(format!(" ×{}", s as f64 / 10.0)), vec![(3, None)]));
    }
    let events = format!(" │ {} ev {:.0}/s │ ", m.events_total, m.rate);
    parts.push((Span::raw(events), vec![(5, Some(Span::raw(format!(" │ {} ev │ ", m.events_total))))]));
    let lost = if m.accounted || m.lost_total > 0 {
        format!("{} lost", m.lost_total)
    } else {
        "loss not known (v0)".to_string()
    };
    parts.push((Span::styled(lost, if m.lost_total > 0 { red } else { Style::new() }), vec![]));
    if m.not_sent > 0 {
        parts.push((Span::styled(format!(" +{} not sent to this view", m.not_sent), red), vec![]));
    }
    // Where and why, while there is room (the largest two; the total always stays).
    if let Some(words) = m.loss_words(2) {
        parts.push((Span::styled(format!(" ({words})"), red), vec![(5, None)]));
    }
    let probes = format!(" │ {} probes ({} skipped)", m.attached, m.skipped);
    if m.skipped == 0 {
        parts.push((
            Span::raw(probes),
            vec![(2, Some(Span::raw(format!(" │ {} probes", m.attached)))), (8, None)],
        ));
    } else {
        parts.push((Span::raw(probes), vec![(2, Some(Span::raw(format!(" │ {} skipped", m.skipped))))]));
    }
    if ui.mode == Mode::Filter || !ui.filter.is_empty() {
        parts.push((Span::raw(format!(" │ /{}", ui.filter)), vec![]));
    }
    parts.push((Span::raw(" │ ? help"), vec![]));
    let width = |parts: &[Part]| parts.iter().map(|(s, _)| s.width()).sum::<usize>();
    let avail = area.width as usize;
    // Rank 1: the source takes what the rest leaves it, down to 12 cells (several hosts
    // say how many and their clocks' offsets before a name is cut).
    let rest = width(&parts) - parts[0].0.width();
    let room = avail.saturating_sub(rest).max(12);
    let source = match &m.source_compact {
        Some(c) if usize::from(fit::width(&source)) > room => c.clone(),
        _ => source,
    };
    parts[0].0 = Span::raw(shorten_source(&source, room as u16));
    for rank in 2..=8 {
        if width(&parts) <= avail {
            break;
        }
        for (span, gives) in parts.iter_mut() {
            if let Some(k) = gives.iter().position(|(r, _)| *r == rank) {
                *span = gives.remove(k).1.unwrap_or_default();
            }
        }
    }
    // What always stays may still be wider than a very narrow terminal: it ends in `…`.
    let spans = fit::cut_spans(parts.into_iter().map(|(s, _)| s).collect(), area.width);
    f.render_widget(Paragraph::new(Line::from(spans)), area);
}

/// `source` in at most `w` cells: "daemon /a/long/path.sock" keeps its first word and
/// the end of its path ("daemon …path.sock"); anything else is cut with `…`.
fn shorten_source(source: &str, w: u16) -> String {
    if fit::width(source) <= w {
        return source.to_string();
    }
    match source.split_once(' ') {
        Some((word, path)) if fit::width(word) + 3 < w => {
            format!("{word} {}", fit::keep_end(path, w - fit::width(word) - 1))
        }
        _ => fit::cut(source, w),
    }
}

/// A plain cell.
fn t(s: impl Into<String>) -> Text {
    (s.into(), Style::new())
}

/// A table fitted to its box (see `fit`): a bold header, the selected row reversed, and
/// a title that names any column there is no room for.
fn table<'a>(cols: &[Col], rows: Vec<Vec<Text>>, title: String, area: Rect) -> Table<'a> {
    let inner = area.width.saturating_sub(2);
    let fit = fit::fit(cols, &rows, inner);
    let title = match fit.hidden.len() {
        0 => fit::cut(&title, inner),
        n => {
            let named = format!("{title} · no room for {}", fit.hidden.join(", "));
            let counted = format!("{title} · {n} hidden");
            fit::cut(if fit::width(&named) <= inner { &named } else { &counted }, inner)
        }
    };
    let last = fit.shown.len().saturating_sub(1);
    let widths: Vec<Constraint> = fit
        .shown
        .iter()
        .enumerate()
        .map(|(k, &(_, w))| if k == last { Constraint::Fill(1) } else { Constraint::Length(w) })
        .collect();
    let header = Row::new(fit.shown.iter().map(|&(i, w)| Cell::from(fit::cut(cols[i].header, w))));
    let rows: Vec<Row> = rows
        .into_iter()
        .map(|r| {
            Row::new(fit.shown.iter().map(|&(i, w)| {
                let (text, style) = r.get(i).cloned().unwrap_or_default();
                Cell::from(fit.cell(cols, i, w, &text)).style(style)
            }))
        })
        .collect();
    Table::new(rows, widths)
        .column_spacing(fit::GAP)
        .header(header.style(Style::new().add_modifier(Modifier::BOLD)))
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
        .block(Block::bordered().title(title))
}

fn table_state(ui: &Ui, len: usize) -> TableState {
    TableState::default().with_selected(ui.row(len))
}

/// An MR's state as its row says it: live or deregistered, and what it is when it pins
/// nothing here (ODP with the mappings its faults made, dma-buf with the exporter's fd).
fn mr_state(r: &MrRow, live: bool) -> String {
    use crate::pipeline::correlate::pins::MrKind;
    let state = if live { "live" } else { "dereg" };
    let mut s = match r.kind {
        MrKind::Pinned => state.to_string(),
        MrKind::Odp => format!("{state} ODP, {} faults, {} pages", r.faults, r.faulted_pages),
        other => format!("{state} {}", other.brief()),
    };
    if r.rereg > 0 {
        s.push_str(&format!(", rereg ×{}", r.rereg));
    }
    s
}

fn pinning(f: &mut Frame, area: Rect, m: &Model, ui: &Ui) {
    let rows: Vec<Vec<Text>> = shown_mrs(m, ui)
        .into_iter()
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
                    (why, Style::new().fg(Color::Red))
                }
                (None, live) => t(mr_state(r, live)),
            };
            vec![
                t(format!("{} {}", m.who(r.pid), render::printable(&r.comm))),
                t(if r.from_tables() { "(rdma res)".to_string() } else { format!("{:#x}", r.addr) }),
                t(bytes(r.length)),
                t(r.pages.map(|p| p.to_string()).unwrap_or("-".into())),
                t(r.access
                    .map(|a| render::text(Render::Access, crate::event::Value::U(a)))
                    .unwrap_or_default()),
                t(ns(r.latency_ns)),
                t(r.lkey.map(|k| format!("{k:#x}")).unwrap_or("-".into())),
                t(r.rkey.map(|k| format!("{k:#x}")).unwrap_or("-".into())),
                state,
            ]
        })
        .collect();
    let n = rows.len();
    const COLS: [Col; 9] = [
        Col::whole("process").max(24).shorten(3, 12).drop(6),
        Col::whole("addr"),
        Col::whole("len"),
        Col::whole("pages").drop(1),
        Col::whole("access").abbrev(2, render::initials).drop(5),
        Col::whole("pin").drop(4),
        Col::whole("lkey"),
        Col::whole("rkey").drop(7),
        Col::whole("state"),
    ];
    let t = table(&COLS, rows, format!("MRs ({n}, newest first)"), area);
    f.render_stateful_widget(t, area, &mut table_state(ui, n));
}

fn mmap(f: &mut Frame, area: Rect, m: &Model, ui: &Ui) {
    let rows: Vec<Vec<Text>> = shown_maps(m, ui)
        .into_iter()
        .map(|r| {
            vec![
                t(format!("{} {}", m.who(r.pid), render::printable(&r.comm))),
                t(format!("{:#x}", r.start)),
                t(bytes(r.end.saturating_sub(r.start))),
                t(r.what()),
                t(r.cache.clone().unwrap_or("-".into())),
                t(r.call.as_ref().map_or("-".into(), |c| c.to_string())),
                t(String::from(if r.unmapped { "unmapped" } else { "mapped" })),
            ]
        })
        .collect();
    let n = rows.len();
    let mapped = shown_maps(m, ui).iter().filter(|r| !r.unmapped).count();
    // Mapped first, newest first; then the unmapped.
    let title = if ui.hide_unmapped {
        format!("uverbs mappings ({mapped} mapped; u shows unmapped)")
    } else {
        format!("uverbs mappings ({n}, {mapped} mapped; u hides unmapped)")
    };
    // What it maps gives way last: the cache mode to its initials first, then the
    // process's name, then the verbs call (a named queue says it), then the cache mode.
    const COLS: [Col; 7] = [
        Col::whole("process").max(24).shorten(2, 12).drop(6),
        Col::whole("start"),
        Col::whole("size"),
        Col::whole("maps").max(48).shorten(5, 16),
        Col::whole("cache").abbrev(1, first_word).drop(4),
        Col::whole("made by").shorten(3, 14).drop(3),
        Col::whole("state").drop(7),
    ];
    let t = table(&COLS, rows, title, area);
    f.render_stateful_widget(t, area, &mut table_state(ui, n));
}

/// "WB (cached)" → "WB".
fn first_word(s: &str) -> String {
    s.split_whitespace().next().unwrap_or(s).to_string()
}

fn completions(f: &mut Frame, area: Rect, m: &Model, ui: &Ui) {
    let cqs = shown_cqs(m, ui);
    let [list, chain] =
        Layout::vertical([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(area);
    let rows: Vec<Vec<Text>> = cqs
        .iter()
        .map(|c| {
            let ctx: Vec<String> = c.by_context.iter().map(|(k, v)| format!("{k} {v}")).collect();
            vec![
                t(format!("{:#x}", c.handle)),
                // a CQ made before the trace began has no known owner
                t(c.pid.map_or("unknown".into(), |p| format!("{} {}", m.who(p), render::printable(&c.comm)))),
                t(c.completions.to_string()),
                t(ctx.join(" ")),
                t(ns(c.wakeup_ns.quantile(0.5))),
                t(ns(c.wakeup_ns.quantile(0.99))),
            ]
        })
        .collect();
    let n = rows.len();
    const COLS: [Col; 6] = [
        Col::whole("CQ"),
        Col::whole("owner").max(24).shorten(1, 12).drop(3),
        Col::whole("events").drop(5),
        Col::whole("ran in").max(40).shorten(2, 12).drop(4),
        Col::whole("wake p50"),
        Col::whole("p99"),
    ];
    // Latencies are of the newest samples a CQ keeps: said once a CQ has more.
    let title = match cqs.iter().any(|c| c.wakeup_ns.windowed()) {
        true => format!("CQs · wakeups of the last {} each", super::model::SAMPLES),
        false => "CQs".into(),
    };
    let t = table(&COLS, rows, title, list);
    f.render_stateful_widget(t, list, &mut table_state(ui, n));
    let Some(c) = ui.pick(&cqs) else {
        f.render_widget(Paragraph::new("no completion events yet").block(Block::bordered()), chain);
        return;
    };
    let ctx = c.by_context.keys().map(|k| k.as_str()).collect::<Vec<_>>().join("/");
    let mut lines = vec![
        format!("{ctx} ({})", ran_in_note(c.by_context.keys().map(|k| k.as_str()))),
        format!("  └─ ib_uverbs_comp_handler          {}", p50_p99(&c.handler_ns)),
        format!("       └─ {:<26}+{}", channel_read(c.channel_fd), p50_p99(&c.wakeup_ns)),
        format!("            └─ ibv_get_cq_event      +{}", p50_p99(&c.library_ns)),
    ];
    if let Some(p) = &c.post {
        // The hop before: the doorbell the completion follows (the newest post before it:
        // a lower bound where posts queue).
        let how = if p.across { "a post on its peer" } else { "its own post, acknowledged" };
        lines.insert(0, format!("{how}, {} → this CQ  ≥{}", p.from, p50_p99(&p.ns)));
    }
    let block = titled(&format!("completion path of CQ {:#x}", c.handle), chain);
    let [text, caption, hist, axis] = Layout::vertical([
        Constraint::Length(lines.len() as u16),
        Constraint::Length(1),
        Constraint::Min(0),
        Constraint::Length(1),
    ])
    .areas(block.inner(chain));
    f.render_widget(block, chain);
    let lines: Vec<Line> = lines.iter().map(|l| Line::from(fit::cut(l, text.width))).collect();
    f.render_widget(Paragraph::new(lines), text);
    let Some(h) = histogram(&c.wakeup_ns, hist.width as usize) else {
        f.render_widget(Paragraph::new(fit::cut("no wakeup measured yet", caption.width)), caption);
        return;
    };
    let tallest = h.counts.iter().max().copied().unwrap_or(0);
    let forms = [
        format!(
            "wakeup latency of the last {} completions: a bar per {} range, the tallest holds {tallest}",
            c.wakeup_ns.0.len(),
            ns(Some(h.step))
        ),
        format!(
            "wakeup, last {}: a bar per {} range, tallest holds {tallest}",
            c.wakeup_ns.0.len(),
            ns(Some(h.step))
        ),
    ];
    let line = forms.iter().find(|l| fit::width(l) <= caption.width).unwrap_or(&forms[1]);
    f.render_widget(Paragraph::new(fit::cut(line, caption.width)), caption);
    f.render_widget(Sparkline::default().data(&h.counts).style(Style::new().fg(Color::Yellow)), hist);
    f.render_widget(Paragraph::new(axis_line(&ns(Some(h.lo)), &ns(Some(h.hi)), axis.width)), axis);
}

/// The wakeup hop's name: the read(2) on the CQ's channel, by its fd where it was seen.
fn channel_read(fd: Option<i32>) -> String {
    match fd {
        Some(fd) => format!("read(fd {fd}) returns"),
        None => "channel read returns".into(),
    }
}

/// A histogram of samples: `counts` in buckets of `step` from `lo` to `hi`.
struct Hist {
    counts: Vec<u64>,
    lo: u64,
    hi: u64,
    step: u64,
}

/// Samples in `n` buckets between their minimum and maximum (a histogram for a sparkline).
fn histogram(s: &Samples, n: usize) -> Option<Hist> {
    let (lo, hi) = (*s.0.iter().min()?, *s.0.iter().max()?);
    let n = n.max(1);
    let step = (hi - lo) / n as u64 + 1;
    let mut counts = vec![0; n];
    for v in s.0.iter() {
        counts[(((v - lo) / step) as usize).min(n - 1)] += 1;
    }
    Some(Hist { counts, lo, hi, step })
}

/// A scale under a chart: `left` at its left edge, `right` at its right edge (just `left`
/// when both do not fit).
pub(crate) fn axis_line(left: &str, right: &str, w: u16) -> String {
    let gap = w.saturating_sub(fit::width(left) + fit::width(right));
    if gap == 0 {
        return fit::cut(left, w);
    }
    format!("{left}{}{right}", " ".repeat(gap as usize))
}

/// "events (40 kept, newest first)"; with a filter, what it matched in all the story keeps.
fn events_title(m: &Model, ui: &Ui, n: usize) -> String {
    match m.found.as_ref().filter(|f| !ui.filter.is_empty() && f.filter == ui.filter) {
        Some(f) if f.matched > n => {
            format!(
                "events matching /{}: {} of {} kept, the newest {n} listed",
                f.filter, f.matched, f.searched
            )
        }
        Some(f) => {
            format!("events matching /{}: {} of {} kept, newest first", f.filter, f.matched, f.searched)
        }
        None => format!("events ({n} kept, newest first)"),
    }
}

fn events(f: &mut Frame, area: Rect, m: &Model, ui: &Ui) {
    let shown = shown_events(m, ui);
    let [list, detail] =
        Layout::vertical([Constraint::Percentage(60), Constraint::Percentage(40)]).areas(area);
    // One line an event; a line too long for the box ends in `…` (the detail below has all).
    let inner = list.width.saturating_sub(2);
    let rows: Vec<Row> = shown.iter().map(|e| Row::new(vec![fit::cut(&event_line(m, e), inner)])).collect();
    let n = rows.len();
    let t = Table::new(rows, [Constraint::Min(10)])
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
        .block(titled(&events_title(m, ui, n), list));
    f.render_stateful_widget(t, list, &mut table_state(ui, n));
    let Some(e) = ui.pick(&shown) else { return };
    // A line a field or a frame, each cut with `…`; what does not fit is counted on the
    // last row, and enter shows the event whole (scrolling).
    let block = titled("detail (enter: the whole event)", detail);
    let inner = block.inner(detail);
    let dim = Style::new().add_modifier(Modifier::DIM);
    let lines = in_rows(&event_detail(m, e), inner.width, inner.height, "enter: the whole event", dim);
    f.render_widget(Paragraph::new(lines).block(block), detail);
}

/// An event's line; with several hosts, the host's name first.
fn event_line(m: &Model, e: &crate::event::Event) -> String {
    let line = crate::output::text::line(e);
    if m.hosts.len() > 1 {
        let host = m.hosts.get(usize::from(e.host)).map_or("?", |h| h.name.as_str());
        format!("@{host} {line}")
    } else {
        line
    }
}

/// `all` in a box `w` cells wide and `rows` high: a line each, cut with `…`; when they do
/// not all fit, the last row counts the rest ("… N more lines (`how`)", in `style`).
fn in_rows(all: &[impl AsRef<str>], w: u16, rows: u16, how: &str, style: Style) -> Vec<Line<'static>> {
    let room = rows as usize;
    let mut lines: Vec<Line> = all.iter().take(room).map(|l| Line::from(fit::cut(l.as_ref(), w))).collect();
    if all.len() > room && room > 0 {
        lines.truncate(room - 1);
        let more = format!("… {} more lines ({how})", all.len() - (room - 1));
        lines.push(Line::styled(fit::cut(&more, w), style));
    }
    lines
}

/// An event whole, a line each: what and where, its fields, its stack (frames the catalog
/// knows are annotated).
pub(crate) fn event_detail(m: &Model, e: &crate::event::Event) -> Vec<String> {
    use crate::event::EventKind;
    // Words, not the enum's names.
    let what = match e.kind {
        EventKind::Entry => "entered",
        EventKind::Return => "returned",
        EventKind::SyscallEnter => "called",
        EventKind::SyscallExit => "returned from",
    };
    let mut lines =
        vec![format!("{} {what} in {} [{}]", e.name, render::printable(&e.comm), m.who(e.process()))];
    lines.extend(e.fields.iter().map(|(k, v)| format!("  {k} = {}", render::field(e, k, v))));
    for frame in &e.stack {
        let note = crate::explain::frames::frame(frame).map(|n| format!("   ← {n}")).unwrap_or_default();
        lines.push(format!("  {frame}{note}"));
    }
    lines
}

/// The companion's steps, newest first; the selected one's events and checks below.
fn steps(f: &mut Frame, area: Rect, m: &Model, ui: &Ui) {
    let shown = shown_steps(m, ui);
    let [list, detail] =
        Layout::vertical([Constraint::Percentage(55), Constraint::Percentage(45)]).areas(area);
    let rows: Vec<Vec<Text>> = shown
        .iter()
        .map(|s| {
            let failed = s.checks.iter().filter(|c| !c.ok).count();
            let checks = match (s.checks.len(), failed) {
                (0, _) => t("-"),
                (n, 0) => (format!("{n} ✓"), Style::new().fg(Color::Green)),
                (n, k) => (format!("{k}/{n} ✗"), Style::new().fg(Color::Red)),
            };
            let how = match (&s.ok, &s.error) {
                (true, _) => t("ok"),
                (false, e) => (format!("FAILED {}", e.as_deref().unwrap_or("")), Style::new().fg(Color::Red)),
            };
            vec![
                t(m.who(s.pid)),
                t(format!("{}.{}", s.run, s.step)),
                t(s.name.clone()),
                t(ns(Some(s.took_ns))),
                t(s.kernel.to_string()),
                checks,
                how,
            ]
        })
        .collect();
    let n = rows.len();
    const COLS: [Col; 7] = [
        Col::whole("pid").drop(2),
        Col::whole("step"),
        Col::whole("name").max(32).shorten(1, 14),
        Col::whole("took"),
        Col::whole("kernel").drop(3),
        Col::whole("checks"),
        Col::whole("result").shorten(4, 12),
    ];
    let t = table(&COLS, rows, format!("companion steps ({n}, newest first)"), list);
    f.render_stateful_widget(t, list, &mut table_state(ui, n));
    let Some(s) = ui.pick(&shown) else {
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
    let title = format!(
        "{} (pid {} thread {}): {}, {} with syscalls and library calls",
        s.name,
        s.pid,
        s.tid,
        crate::units::count(s.kernel as u64, "kernel event"),
        s.events.len()
    );
    f.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }).block(titled(&title, detail)), detail);
}

/// The loss view's title.
pub(crate) const LOSS_TITLE: &str = "what was lost, where and why (l or esc closes)";

/// The help box's lines: a key and what it does.
pub(crate) const HELP: [&str; 17] = [
    "tab / 1-6   switch screens",
    "↑↓ j k      select a row",
    "e           explain the selected row's path (MR, mapping,",
    "            CQ, event); ↑↓ scroll it, e or esc close it",
    "enter       the selected event whole (Events)",
    "u           show or hide the unmapped (Mmap)",
    "l           what was lost: by host, probe and reason",
    "/           filter by pid, comm, lkey, rkey, CQ, @host,",
    "            container:ID or cgroup path; esc clears",
    "space       pause: a replay stops; live, the screen holds",
    "            still while the counts go on",
    "n           step one event (paused replay)",
    "+ -         replay speed ×0.1 … ×100",
    "g G         replay from the start / to the end",
    "? esc       close this help; q quits",
    "LW|RW|RR    access flags, as initials when narrow",
    "no room for, N hidden   columns left out when narrow",
];

/// The keys, over the middle of the body: each line cut with `…` when the box is narrow,
/// and a last line counting what a short terminal has no room for.
fn help(f: &mut Frame, area: Rect) {
    let w = area.width.min(62);
    let h = area.height.min(HELP.len() as u16 + 2);
    let r = Rect { x: area.x + (area.width - w) / 2, y: area.y + (area.height - h) / 2, width: w, height: h };
    let lines = in_rows(
        &HELP,
        w.saturating_sub(2),
        h.saturating_sub(2),
        "a taller terminal shows them",
        Style::new(),
    );
    f.render_widget(Clear, r);
    f.render_widget(Paragraph::new(lines).block(titled("keys (? or esc closes)", r)), r);
}

/// What the contexts a CQ's completions ran in mean; where exactly, its frames say (`e`).
fn ran_in_note<'a>(contexts: impl Iterator<Item = &'a str>) -> &'static str {
    let all: Vec<&str> = contexts.collect();
    match all.as_slice() {
        ["kworker"] => "soft-RoCE's tasks run as queued work",
        ["softirq"] => "a NIC's interrupt, or soft-RoCE's tasklet: e says which",
        _ => "where each ran, e says from its frames",
    }
}
