//! Fitting a table to the width it is given, so that nothing is cut silently. Every
//! column first asks for the width its header and cells need. When the table is wider
//! than its box, columns give way one concession at a time, in the order of their ranks:
//! a lesser column is dropped whole (and the title names it), a column switches to its
//! abbreviated form (access flags as initials), or a long text (a process name) is
//! shortened to a floor. Width left over afterwards goes back to what was
//! shortened. An address or a key is never shortened while anything else can give way;
//! when a cell must still be shortened (a very narrow terminal), it ends in `…`, never in
//! a plausible wrong digit.

use ratatui::style::Style;
use ratatui::text::Span;

/// The space ratatui's `Table` puts between two columns.
pub(crate) const GAP: u16 = 1;

/// A cell's text and style.
pub(crate) type Text = (String, Style);

/// A column's shorter form of a cell (access flags as initials).
pub(crate) type Short = fn(&str) -> String;

/// One column of a table, and how it may give way when the table does not fit.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Col {
    pub header: &'static str,
    /// Its cells are cut to this many cells at most (with `…`), however wide the table.
    pub max: u16,
    /// At this rank it may be shortened (its cells ending in `…`) down to this width.
    pub shorten: Option<(u8, u16)>,
    /// At this rank it may be dropped.
    pub drop: Option<u8>,
    /// At this rank its cells may be written in this shorter form.
    pub abbrev: Option<(u8, Short)>,
}

impl Col {
    /// A column that keeps its full width while anything else can give way (an address,
    /// a key, a state).
    pub(crate) const fn whole(header: &'static str) -> Self {
        Col { header, max: u16::MAX, shorten: None, drop: None, abbrev: None }
    }
    pub(crate) const fn max(self, max: u16) -> Self {
        Col { max, ..self }
    }
    pub(crate) const fn shorten(self, rank: u8, to: u16) -> Self {
        Col { shorten: Some((rank, to)), ..self }
    }
    pub(crate) const fn drop(self, rank: u8) -> Self {
        Col { drop: Some(rank), ..self }
    }
    pub(crate) const fn abbrev(self, rank: u8, short: Short) -> Self {
        Col { abbrev: Some((rank, short)), ..self }
    }
}

/// Which columns are shown, at which widths.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Fit {
    /// Indices of the shown columns, in order, and each one's width.
    pub shown: Vec<(usize, u16)>,
    /// Headers of the dropped columns.
    pub hidden: Vec<&'static str>,
    /// Indices of the columns written in their abbreviated form.
    pub abbreviated: Vec<usize>,
}

impl Fit {
    /// Cell `i` of a row as it is shown: abbreviated if its column is, cut to `w`.
    pub(crate) fn cell(&self, cols: &[Col], i: usize, w: u16, text: &str) -> String {
        match cols[i].abbrev {
            Some((_, short)) if self.abbreviated.contains(&i) => cut(&short(text), w),
            _ => cut(text, w),
        }
    }
}

/// How many terminal cells `s` takes.
pub(crate) fn width(s: &str) -> u16 {
    Span::raw(s).width().min(u16::MAX as usize) as u16
}

/// `s` in at most `w` cells: whole if it fits, else shortened and ending in `…`.
pub(crate) fn cut(s: &str, w: u16) -> String {
    if width(s) <= w {
        return s.to_string();
    }
    if w == 0 {
        return String::new();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in s.chars() {
        let cw = width(c.encode_utf8(&mut [0; 4]));
        if used + cw > w - 1 {
            break;
        }
        out.push(c);
        used += cw;
    }
    out.push('…');
    out
}

/// `s` in at most `w` cells keeping its end: whole if it fits, else `…` and its tail.
pub(crate) fn keep_end(s: &str, w: u16) -> String {
    if width(s) <= w {
        return s.to_string();
    }
    let mut room = w.saturating_sub(1);
    let mut tail: Vec<char> = Vec::new();
    for c in s.chars().rev() {
        let cw = width(c.encode_utf8(&mut [0; 4]));
        if cw > room {
            break;
        }
        room -= cw;
        tail.push(c);
    }
    format!("…{}", tail.iter().rev().collect::<String>())
}

/// Styled pieces of one line in at most `w` cells: all of them if they fit; else the piece
/// that reaches the edge ends in `…` and those after it go (each keeps its style).
pub(crate) fn cut_spans(spans: Vec<Span<'static>>, w: u16) -> Vec<Span<'static>> {
    if spans.iter().map(|s| width(&s.content)).sum::<u16>() <= w {
        return spans;
    }
    let mut out = Vec::new();
    let mut left = w;
    for s in spans {
        let sw = width(&s.content);
        if left == 0 {
            break;
        }
        if sw < left {
            left -= sw;
            out.push(s);
            continue;
        }
        let text = match (sw > left, left) {
            (true, _) => cut(&s.content, left),
            (false, 1) => "…".to_string(),
            (false, _) => cut(&s.content, left - 1),
        };
        out.push(Span::styled(text, s.style));
        break;
    }
    out
}

/// Tab titles ("1 Overview") in at most `w` cells as ratatui's `Tabs` lays them out (one
/// cell of padding each side, a one-cell divider between): whole if they fit; else the
/// screens not shown are abbreviated ("2 Pin"), then only numbered ("2"); the shown one
/// stays named, cut with `…` only when nothing else is left to give.
pub(crate) fn tabs(names: &[&str], selected: usize, w: u16) -> Vec<String> {
    let laid = |t: &[String]| t.iter().map(|s| width(s) + 2).sum::<u16>() + t.len().saturating_sub(1) as u16;
    let form = |short: usize| -> Vec<String> {
        names
            .iter()
            .enumerate()
            .map(|(i, n)| match (i == selected, short) {
                (true, _) | (_, 0) => format!("{} {n}", i + 1),
                (false, 1) => format!("{} {}", i + 1, n.chars().take(3).collect::<String>()),
                (false, _) => (i + 1).to_string(),
            })
            .collect()
    };
    for short in 0..3 {
        let t = form(short);
        if laid(&t) <= w {
            return t;
        }
    }
    let mut t = form(2);
    let others = laid(&t) - width(&t[selected]);
    t[selected] = cut(&t[selected], w.saturating_sub(others));
    t
}

/// The cells and gaps the shown columns (`Some` width) take.
fn total(widths: &[Option<u16>]) -> u16 {
    let shown: Vec<u16> = widths.iter().flatten().copied().collect();
    shown.iter().sum::<u16>() + GAP * shown.len().saturating_sub(1) as u16
}

enum Give {
    Shorten(usize, u16),
    Drop(usize),
    Abbrev(usize, Short),
}

/// Lay `cols` out in `avail` cells for `rows`.
pub(crate) fn fit(cols: &[Col], rows: &[Vec<Text>], avail: u16) -> Fit {
    let natural_of = |i: usize, form: &dyn Fn(&str) -> String| {
        let cells = rows.iter().filter_map(|r| r.get(i)).map(|(s, _)| width(&form(s))).max().unwrap_or(0);
        cells.min(cols[i].max).max(width(cols[i].header))
    };
    let mut natural: Vec<u16> = (0..cols.len()).map(|i| natural_of(i, &|s| s.to_string())).collect();
    let mut widths: Vec<Option<u16>> = natural.iter().map(|&w| Some(w)).collect();
    let mut steps: Vec<(u8, Give)> = Vec::new();
    for (i, c) in cols.iter().enumerate() {
        if let Some((rank, to)) = c.shorten {
            steps.push((rank, Give::Shorten(i, to.max(width(c.header)))));
        }
        if let Some(rank) = c.drop {
            steps.push((rank, Give::Drop(i)));
        }
        if let Some((rank, short)) = c.abbrev {
            steps.push((rank, Give::Abbrev(i, short)));
        }
    }
    steps.sort_by_key(|(rank, _)| *rank);
    let mut hidden = Vec::new();
    let mut abbreviated = Vec::new();
    for (_, give) in steps {
        let over = total(&widths).saturating_sub(avail);
        if over == 0 {
            break;
        }
        match give {
            Give::Shorten(i, to) => {
                if let Some(w) = &mut widths[i] {
                    *w = w.saturating_sub(over).max(to.min(*w));
                }
            }
            Give::Drop(i) => {
                if widths[i].take().is_some() {
                    hidden.push(cols[i].header);
                }
            }
            Give::Abbrev(i, short) => {
                if let Some(w) = &mut widths[i] {
                    natural[i] = natural_of(i, &short);
                    *w = (*w).min(natural[i]);
                    abbreviated.push(i);
                }
            }
        }
    }
    // Still too wide: shorten what is shown, the widest first; when all are one cell
    // wide, drop columns from the right. Room left: give it back to what was shortened,
    // in column order.
    while total(&widths) > avail {
        if let Some(widest) = widths.iter_mut().flatten().filter(|w| **w > 1).max_by_key(|w| **w) {
            *widest -= 1;
        } else if let Some(i) = widths.iter().rposition(Option::is_some) {
            widths[i] = None;
            hidden.push(cols[i].header);
        }
    }
    let mut spare = avail.saturating_sub(total(&widths));
    for (w, n) in widths.iter_mut().zip(&natural) {
        if let Some(w) = w {
            let back = spare.min(n - *w);
            *w += back;
            spare -= back;
        }
    }
    let shown = widths.iter().enumerate().filter_map(|(i, w)| w.map(|w| (i, w))).collect();
    Fit { shown, hidden, abbreviated }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(cells: &[&[&str]]) -> Vec<Vec<Text>> {
        cells.iter().map(|r| r.iter().map(|s| (s.to_string(), Style::new())).collect()).collect()
    }

    const COLS: [Col; 4] = [
        Col::whole("process").max(24).shorten(2, 8).drop(4),
        Col::whole("addr"),
        Col::whole("pages").drop(1),
        Col::whole("access").max(14).drop(3),
    ];

    fn one_mr() -> Vec<Vec<Text>> {
        rows(&[&["199 rdma-trace-work", "0x7fd062d6c000", "256", "LOCAL_WRITE"]])
    }

    const NAMES: [&str; 6] = ["Overview", "Pinning", "Mmap", "Completions", "Events", "Steps"];

    #[test]
    fn tabs_give_way_to_initials_then_numbers_and_the_shown_one_stays_named() {
        let laid = |t: &[String]| t.iter().map(|s| width(s) + 2).sum::<u16>() + t.len() as u16 - 1;
        let whole = tabs(&NAMES, 3, 80);
        assert_eq!(whole[0], "1 Overview");
        assert_eq!(laid(&whole), 70);
        let short = tabs(&NAMES, 3, 60);
        assert_eq!(short, ["1 Ove", "2 Pin", "3 Mma", "4 Completions", "5 Eve", "6 Ste"]);
        let numbers = tabs(&NAMES, 3, 40);
        assert_eq!(numbers, ["1", "2", "3", "4 Completions", "5", "6"]);
        let cut = tabs(&NAMES, 3, 30);
        assert_eq!(cut[3], "4 Compl…");
        for w in [24, 30, 40, 60, 80] {
            assert!(laid(&tabs(&NAMES, 3, w)) <= w, "{w}");
        }
    }

    #[test]
    fn spans_cut_at_the_edge_end_in_an_ellipsis_and_keep_their_styles() {
        let red = Style::new().fg(ratatui::style::Color::Red);
        let spans = || vec![Span::raw("12 ev │ "), Span::styled("3 lost", red), Span::raw(" │ ? help")];
        assert_eq!(cut_spans(spans(), 22).len(), 3);
        let cut = cut_spans(spans(), 12);
        let text: String = cut.iter().map(|s| s.content.to_string()).collect();
        assert_eq!(text, "12 ev │ 3 l…");
        assert_eq!(cut[1].style, red);
        // A piece that ends exactly at the edge, with more after it, still says `…`.
        let text: String = cut_spans(spans(), 14).iter().map(|s| s.content.to_string()).collect();
        assert_eq!(text, "12 ev │ 3 lo…");
    }

    #[test]
    fn everything_at_its_natural_width_when_there_is_room() {
        let f = fit(&COLS, &one_mr(), 80);
        assert_eq!(f.shown, vec![(0, 19), (1, 14), (2, 5), (3, 11)]);
        assert!(f.hidden.is_empty());
    }

    #[test]
    fn concessions_in_rank_order_and_the_address_stays_whole() {
        // 19+14+5+11 + 3 gaps = 52. At 48 pages (rank 1) goes, and 46 fits.
        let f = fit(&COLS, &one_mr(), 48);
        assert_eq!((f.shown, f.hidden), (vec![(0, 19), (1, 14), (3, 11)], vec!["pages"]));
        // At 40 the process is shortened next (rank 2), by just what is needed.
        let f = fit(&COLS, &one_mr(), 40);
        assert_eq!((f.shown, f.hidden), (vec![(0, 13), (1, 14), (3, 11)], vec!["pages"]));
        // At 30 the process reaches its floor, access goes (rank 3), and the process
        // gets back what is left over.
        let f = fit(&COLS, &one_mr(), 30);
        assert_eq!((f.shown, f.hidden), (vec![(0, 15), (1, 14)], vec!["pages", "access"]));
    }

    #[test]
    fn a_column_abbreviates_at_its_rank() {
        fn initials(s: &str) -> String {
            s.split('|')
                .map(|f| f.split('_').filter_map(|w| w.chars().next()).collect::<String>())
                .collect::<Vec<_>>()
                .join("|")
        }
        let cols =
            [Col::whole("addr"), Col::whole("access").abbrev(1, initials), Col::whole("state").drop(2)];
        let r = rows(&[&["0x7fd062d6c000", "LOCAL_WRITE|REMOTE_WRITE", "live"]]);
        // 14+24+6 + 2 gaps = 46.
        assert_eq!(fit(&cols, &r, 46).abbreviated, Vec::<usize>::new());
        let f = fit(&cols, &r, 30);
        assert_eq!(
            (&f.shown, &f.hidden, &f.abbreviated),
            (&vec![(0, 14), (1, 6), (2, 5)], &vec![], &vec![1])
        );
        assert_eq!(f.cell(&cols, 1, 6, "LOCAL_WRITE|REMOTE_WRITE"), "LW|RW");
    }

    #[test]
    fn too_narrow_for_even_the_address_marks_the_cut() {
        let f = fit(&COLS, &one_mr(), 12);
        assert_eq!((f.shown, f.hidden), (vec![(1, 12)], vec!["pages", "access", "process"]));
        assert_eq!(cut("0x7fd062d6c000", 12), "0x7fd062d6c…");
    }

    #[test]
    fn on_a_few_cells_the_rightmost_columns_go_too_and_are_named() {
        let cols = [Col::whole("addr"), Col::whole("lkey"), Col::whole("state")];
        let r = rows(&[&["0x7fd062d6c000", "0x18c0", "live"]]);
        let f = fit(&cols, &r, 3);
        assert_eq!((f.shown, f.hidden), (vec![(0, 1), (1, 1)], vec!["state"]));
        assert_eq!(fit(&cols, &r, 0).shown, vec![]);
    }

    #[test]
    fn a_cell_wider_than_its_column_s_cap_ends_in_an_ellipsis() {
        let r = rows(&[&["1 a", "0x1", "1", "LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ"]]);
        let f = fit(&COLS, &r, 80);
        assert_eq!(f.shown[3], (3, 14));
        assert_eq!(cut("LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ", 14), "LOCAL_WRITE|R…");
        assert_eq!(cut("115µs", 5), "115µs");
        assert_eq!(cut("115µs", 4), "115…");
        assert_eq!(keep_end("/run/rdma-trace.sock", 12), "…-trace.sock");
        assert_eq!(keep_end("/run/x.sock", 12), "/run/x.sock");
    }
}
