//! The Overview: the three paths side by side, each box a summary that fits its size
//! (whole items, the rest counted, lines wrapped between figures).

use super::fit;
use super::format::{bytes, ns, titled};
use super::model::{CqRow, Model};
use super::ui::Screen;
use crate::pipeline::render;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Gauge, Paragraph, Sparkline};

/// Logical lines of tokens, each wrapped to `w` cells between its tokens (a token is
/// never split; one wider than `w` is cut with `…`). A line starts at its indent, and
/// what wraps goes two further in.
fn wrap(lines: &[(usize, Vec<String>)], w: u16) -> Vec<Line<'static>> {
    let mut out = Vec::new();
    for (indent, tokens) in lines {
        let mut line = " ".repeat(*indent);
        let mut fresh = true;
        for tok in tokens {
            let sep = if fresh { "" } else { " " };
            if !fresh && fit::width(&line) + fit::width(sep) + fit::width(tok) > w {
                out.push(Line::from(fit::cut(&std::mem::replace(&mut line, " ".repeat(indent + 2)), w)));
                line.push_str(tok);
            } else {
                line.push_str(sep);
                line.push_str(tok);
            }
            fresh = false;
        }
        out.push(Line::from(fit::cut(&line, w)));
    }
    out
}

/// The labels of the first items that fit whole in `avail` rows (each its label and
/// `extra` rows more), keeping one row for a "+N more" line when not all of them do.
/// Labels are made only as far as they fit (a daemon may have seen thousands of CQs).
fn fitting<T>(
    items: &[T],
    avail: u16,
    extra: u16,
    label: impl Fn(&T) -> Vec<Line<'static>>,
) -> Vec<Vec<Line<'static>>> {
    let mut out = Vec::new();
    let mut used = 0u32;
    for (k, item) in items.iter().enumerate() {
        let l = label(item);
        let reserve = if k + 1 == items.len() { 0 } else { 1 };
        if used + l.len() as u32 + extra as u32 + reserve > avail as u32 {
            break;
        }
        used += l.len() as u32 + extra as u32;
        out.push(l);
    }
    out
}

/// "+N more … (K Screen)" in `w` cells, for a box that shows only the first items.
fn more(n: usize, what: &str, screen: Screen, w: u16) -> Line<'static> {
    let (k, screen) = (screen.index() + 1, screen.name());
    let forms = [format!("+{n} more {what} ({k} {screen})"), format!("+{n} more ({k} {screen})")];
    let text = forms.iter().find(|t| fit::width(t) <= w).cloned().unwrap_or_else(|| fit::cut(&forms[1], w));
    Line::styled(text, Style::new().add_modifier(Modifier::DIM))
}

pub(crate) fn draw(f: &mut Frame, area: Rect, m: &Model) {
    let [pin, map, comp] = Layout::horizontal([Constraint::Ratio(1, 3); 3]).areas(area);
    overview_pinning(f, pin, m);
    overview_mmap(f, map, m);
    overview_completions(f, comp, m);
}

/// A gauge per process (pinned against its memlock limit), then pin latency.
fn overview_pinning(f: &mut Frame, pin: Rect, m: &Model) {
    let block = titled("Pinning", pin);
    let inner = block.inner(pin);
    f.render_widget(block, pin);
    let mut procs: Vec<_> = m.procs.values().filter(|p| p.mrs_total > 0 || p.refused > 0).collect();
    procs.sort_by_key(|p| std::cmp::Reverse((p.pinned, p.mrs_live, p.mrs_total)));
    let (p50, p99) = (ns(m.pin_ns.quantile(0.5)), ns(m.pin_ns.quantile(0.99)));
    // The sparkline below: a bar per pin, the newest on the right, its scale said.
    let spark: Vec<u64> = m.pin_ns.0.iter().rev().take(inner.width as usize).rev().copied().collect();
    let mut said = vec![(0, vec!["pin latency".into(), format!("p50 {p50}"), format!("p99 {p99}")])];
    if m.pin_ns.windowed() {
        said[0].1.push(format!("(last {} pins)", m.pin_ns.0.len()));
    }
    let mut latency = wrap(&said, inner.width);
    // The scale only where the bars get rows of their own after a process (or the line
    // counting the processes): a short box keeps its rows for those.
    if let Some(max) = spark.iter().max() {
        let n = spark.len();
        let scale = [(0, vec![format!("bars: last {n} pins,"), format!("tallest {}", ns(Some(*max)))])];
        let scale = wrap(&scale, inner.width);
        if (latency.len() + scale.len() + 4) as u16 <= inner.height {
            latency.extend(scale);
        }
    }
    if latency.len() as u16 > inner.height {
        latency = vec![Line::from(fit::cut(&format!("pin p50 {p50} p99 {p99}"), inner.width))];
    }
    let lat_rows = (latency.len() as u16).min(inner.height);
    let labels = fitting(&procs, inner.height.saturating_sub(lat_rows + 1), 1, |p| {
        let refused = if p.refused > 0 { format!(", {} refused", p.refused) } else { String::new() };
        let who = format!("{} [{}]", render::printable(&p.comm), m.who(p.pid));
        let mut words = vec![who];
        words.extend(p.container().map(|c| format!("container {c}")));
        words.push(format!("{} live/{} MRs{refused}", p.mrs_live, p.mrs_total));
        wrap(&[(0, words)], inner.width)
    });
    let n = labels.len();
    let more_row = n < procs.len() && inner.height > lat_rows;
    let mut rows: Vec<Constraint> = labels.iter().map(|l| Constraint::Length(l.len() as u16 + 1)).collect();
    if more_row {
        rows.push(Constraint::Length(1));
    }
    rows.push(Constraint::Length(lat_rows));
    rows.push(Constraint::Min(0));
    let parts = Layout::vertical(rows).split(inner);
    if more_row {
        f.render_widget(
            Paragraph::new(more(procs.len() - n, "processes", Screen::Pinning, inner.width)),
            parts[n],
        );
    }
    let n_rows = n + more_row as usize;
    for (i, (p, label)) in procs.iter().zip(labels).enumerate() {
        let [text, bar] =
            Layout::vertical([Constraint::Length(label.len() as u16), Constraint::Length(1)]).areas(parts[i]);
        f.render_widget(Paragraph::new(label), text);
        let (ratio, text) = match p.memlock_limit {
            Some(l) if l != u64::MAX && l > 0 => (
                (p.pinned as f64 / l as f64).min(1.0),
                format!("{} of {} memlock", bytes(p.pinned), bytes(l)),
            ),
            _ => {
                let long = format!("{} (memlock unlimited)", bytes(p.pinned));
                let short = format!("{} (no limit)", bytes(p.pinned));
                (0.0, if fit::width(&long) <= bar.width { long } else { short })
            }
        };
        f.render_widget(
            Gauge::default()
                .ratio(ratio)
                .label(fit::cut(&text, bar.width))
                .gauge_style(Style::new().fg(Color::Cyan)),
            bar,
        );
    }
    f.render_widget(Paragraph::new(latency), parts[n_rows]);
    f.render_widget(Sparkline::default().data(&spark), parts[n_rows + 1]);
}

/// Mappings per process and what they map: by kind where the driver says (mlx5's
/// command in the offset), else by the verbs call that made them (rxe's offset is a key).
fn overview_mmap(f: &mut Frame, map: Rect, m: &Model) {
    let mut lines = Vec::new();
    for p in m.procs.values().filter(|p| p.mappings > 0) {
        lines.push((
            0,
            vec![
                format!("{} [{}]:", render::printable(&p.comm), m.who(p.pid)),
                format!("{} mappings", p.mappings),
            ],
        ));
        let mut kinds: std::collections::BTreeMap<String, u64> = Default::default();
        for r in m.maps.iter().filter(|r| r.pid == p.pid) {
            let kind = match (&r.queue, &r.call, r.kind.starts_with("offset ")) {
                (Some(q), ..) => q.kind.short().to_string(),
                (None, Some(call), true) => format!("by {call}"),
                _ => r.kind.clone(),
            };
            *kinds.entry(kind).or_default() += 1;
        }
        for (k, c) in kinds {
            lines.push((2, format!("{c} × {k}").split(' ').map(String::from).collect()));
        }
    }
    let block = titled("Mmap", map);
    let inner = block.inner(map);
    let mut text = wrap(&lines, inner.width);
    if text.len() > inner.height as usize {
        let keep = inner.height.saturating_sub(1) as usize;
        let rest = text.len() - keep;
        text.truncate(keep);
        text.push(more(rest, "lines", Screen::Mmap, inner.width));
    }
    f.render_widget(Paragraph::new(text).block(block), map);
}

/// Per CQ a rate sparkline, the context, wakeup latency.
fn overview_completions(f: &mut Frame, comp: Rect, m: &Model) {
    let block = titled("Completions", comp);
    let inner = block.inner(comp);
    f.render_widget(block, comp);
    let mut cqs: Vec<&CqRow> = m.cqs.values().collect();
    cqs.sort_by_key(|c| std::cmp::Reverse(c.completions));
    let labels = fitting(&cqs, inner.height, 1, |c| {
        let peak = c.per_second.iter().max().copied().unwrap_or(0);
        let mut ran: Vec<String> = vec![c.completions.to_string()];
        let n = c.by_context.len();
        for (k, (ctx, count)) in c.by_context.iter().enumerate() {
            let open = if k == 0 { "(" } else { "" };
            let close = if k + 1 == n { ")" } else { "," };
            ran.push(format!("{open}{ctx} {count}{close}"));
        }
        let wake = vec![
            "wake".into(),
            format!("p50 {}", ns(c.wakeup_ns.quantile(0.5))),
            format!("p99 {}", ns(c.wakeup_ns.quantile(0.99))),
            format!("· bars /s, peak {peak}"),
        ];
        let who = format!("{} [{}]", render::printable(&c.comm), m.who(c.pid.unwrap_or_default()));
        wrap(&[(0, vec![format!("CQ {:#x}", c.handle), who]), (1, ran), (1, wake)], inner.width)
    });
    let n = labels.len();
    let parts = Layout::vertical(
        labels.iter().map(|l| Constraint::Length(l.len() as u16 + 1)).chain([Constraint::Min(0)]),
    )
    .split(inner);
    if n < cqs.len() && inner.height > 0 {
        f.render_widget(
            Paragraph::new(more(cqs.len() - n, "CQs", Screen::Completions, inner.width)),
            parts[n],
        );
    }
    for (i, (c, label)) in cqs.iter().zip(labels).enumerate() {
        let [text, spark] =
            Layout::vertical([Constraint::Length(label.len() as u16), Constraint::Length(1)]).areas(parts[i]);
        f.render_widget(Paragraph::new(label), text);
        let data: Vec<u64> = c.per_second.iter().copied().collect();
        f.render_widget(Sparkline::default().data(&data).style(Style::new().fg(Color::Green)), spark);
    }
}
