//! Kernel stacks per path as folded lines (`path;outermost;…;innermost count`, what flame
//! graph tools read) and as a flame graph (SVG, drawn here: no third-party renderer).

use crate::event::{Event, EventKind, Path};
use crate::pipeline::correlate::aggregate::functions;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Folded stacks of the entry events that carry a kernel stack, the path as the root frame.
pub fn folded(events: &[Event]) -> String {
    let mut f = Folded::default();
    events.iter().for_each(|e| f.event(e));
    f.text()
}

/// Folded stacks counted as the capture is read: a line per distinct stack, not per event.
#[derive(Default)]
pub(crate) struct Folded(BTreeMap<String, u64>);

impl Folded {
    pub(crate) fn event(&mut self, e: &Event) {
        if e.kind != EventKind::Entry || e.stack.is_empty() || matches!(e.path, Path::Syscall | Path::Verbs) {
            return;
        }
        let mut frames = functions(&e.stack);
        frames.reverse();
        let line = std::iter::once(e.path.as_str().to_string()).chain(frames).collect::<Vec<_>>().join(";");
        *self.0.entry(line).or_default() += 1;
    }

    pub(crate) fn text(&self) -> String {
        self.0.iter().map(|(k, v)| format!("{k} {v}\n")).collect()
    }
}

#[derive(Default)]
struct Node {
    count: u64,
    children: BTreeMap<String, Node>,
}

fn tree(folded: &str) -> Node {
    let mut root = Node::default();
    for line in folded.lines() {
        let Some((stack, n)) = line.rsplit_once(' ') else { continue };
        let Ok(n) = n.parse::<u64>() else { continue };
        root.count += n;
        let mut at = &mut root;
        for f in stack.split(';') {
            at = at.children.entry(f.to_string()).or_default();
            at.count += n;
        }
    }
    root
}

const WIDTH: f64 = 1200.0;
const ROW: f64 = 18.0;
/// The width a label's character is given: 12-pixel monospace is 7.2 px wide in chromium
/// (DejaVu Sans Mono, measured by `cargo xtask perfetto-check`); 7.0 let a long label run
/// past its frame. Half a pixel to spare for other monospace fonts.
const CHAR: f64 = 7.5;

fn depth(n: &Node) -> usize {
    1 + n.children.values().map(depth).max().unwrap_or(0)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A warm colour from the name (the same frame is the same colour in every graph).
fn colour(name: &str) -> String {
    let h = name.bytes().fold(2166136261u32, |h, b| (h ^ b as u32).wrapping_mul(16777619));
    format!("rgb({},{},{})", 205 + h % 50, 80 + (h >> 8) % 120, 40 + (h >> 16) % 50)
}

/// The flame graph of folded stacks: the root at the bottom, each frame as wide as its
/// share of the probe hits; hovering shows the frame and its count.
pub fn svg(folded: &str, title: &str) -> String {
    let root = tree(folded);
    let height = (depth(&root) as f64 + 2.0) * ROW;
    let mut out = String::new();
    write_svg(&mut out, &root, height, title).expect("formatting into a String cannot fail");
    out
}

fn write_svg(out: &mut String, root: &Node, height: f64, title: &str) -> std::fmt::Result {
    writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="monospace" font-size="12">"#
    )?;
    writeln!(out, r#"<text x="{}" y="14" text-anchor="middle">{}</text>"#, WIDTH / 2.0, escape(title))?;
    draw(out, "all", root, 0.0, WIDTH, 0, root.count.max(1), height)?;
    out.push_str("</svg>\n");
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn draw(
    out: &mut String,
    name: &str,
    n: &Node,
    x: f64,
    w: f64,
    level: usize,
    total: u64,
    height: f64,
) -> std::fmt::Result {
    if w < 0.5 {
        return Ok(());
    }
    let y = height - (level as f64 + 1.0) * ROW;
    let pct = n.count as f64 * 100.0 / total as f64;
    // A label of three characters at least (a name cut shorter says nothing), cut by
    // characters (a frame name from a capture may hold any UTF-8) and marked "..".
    let fit = ((w - 4.0) / CHAR).max(0.0) as usize;
    let label = match name.chars().count() {
        _ if fit < 3 => String::new(),
        n if n <= fit => name.to_string(),
        _ => format!("{}..", name.chars().take(fit - 2).collect::<String>()),
    };
    writeln!(
        out,
        r#"<g><title>{} ({} hits, {pct:.1}%)</title><rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{}" rx="2"/><text x="{:.1}" y="{:.1}">{}</text></g>"#,
        escape(name),
        n.count,
        w,
        ROW - 1.0,
        colour(name),
        x + 3.0,
        y + ROW - 5.0,
        escape(&label)
    )?;
    let mut cx = x;
    for (child, c) in &n.children {
        let cw = w * c.count as f64 / n.count.max(1) as f64;
        draw(out, child, c, cx, cw, level + 1, total, height)?;
        cx += cw;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flame_graph_draws_each_frame_as_wide_as_its_samples() {
        let folded = "pin;a;b 3\npin;a;c 1\nmmap;d 4\n";
        let s = svg(folded, "t");
        // all, pin, a, b, c, mmap, d
        assert_eq!(s.matches("<rect").count(), 7, "{s}");
        assert!(s.contains("<title>b (3 hits, 37.5%)</title>"), "{s}");
        assert!(s.contains(r#"width="1200.0""#) && s.contains(r#"width="600.0""#), "{s}");
        assert!(s.contains("<title>all (8 hits, 100.0%)</title>"));
    }

    #[test]
    fn a_long_name_with_multibyte_characters_is_cut_by_characters() {
        // One frame among many (narrow) whose name is mostly multibyte: cut, never split.
        let name = "é".repeat(400);
        let folded = format!(
            "pin;{name} 1
pin;x 30
"
        );
        let s = svg(&folded, "t");
        assert!(s.contains("é.."), "{s}");
    }
}
