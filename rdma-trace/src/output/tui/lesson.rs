//! `e`: the explanation of the selected row's path (the same text as `rdma-trace explain`),
//! built from the events the model keeps and anchored on the row's own event: an MR's pin
//! (Pinning), a mapping's mmap (Mmap), a CQ's latest completion (Completions), or the
//! event itself (Events).

use super::model::Model;
use super::screens::{self, SCREENS, Ui};
use crate::event::{Event, EventKind, ProbeId};
use crate::output::explain::{self, Input};
use crate::plan::lessons::Topic;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::widgets::{Block, Clear, Paragraph, Wrap};

/// The title of an explanation's box.
pub const TITLE: &str = "explain (↑↓ scroll, e or esc close)";

/// What `e` explains on the screen shown: a topic and the kept event to anchor it on, or
/// why there is nothing to explain.
fn chosen(m: &Model, ui: &Ui) -> Result<(Topic, usize), String> {
    let at = |rows: usize| ui.selected.min(rows.saturating_sub(1));
    let newest = |is: &dyn Fn(&Event) -> bool| m.events.iter().rposition(is);
    let gone = |what: String| {
        format!(
            "The events of {what} are no longer among the {} kept on screen (the newest {}); \
             `rdma-trace explain` explains it from a capture.",
            m.events.len(),
            super::model::EVENTS
        )
    };
    match SCREENS[ui.screen] {
        "Pinning" => {
            let rows = screens::shown_mrs(m, ui);
            let r = rows.get(at(rows.len())).ok_or("No MR selected.")?;
            if r.from_tables() {
                return Err("This MR was registered before this viewer joined (it is known from the \
                            kernel's tables): its pin was not seen, so there is nothing to explain."
                    .into());
            }
            let pin = |e: &Event| {
                e.is(ProbeId::UmemGet)
                    && e.kind == EventKind::Entry
                    && e.tid == r.tid
                    && e.field("addr") == Some(r.addr)
            };
            Ok((Topic::Mr, newest(&pin).ok_or_else(|| gone(format!("the MR at {:#x}", r.addr)))?))
        }
        "Mmap" => {
            let rows = screens::shown_maps(m, ui);
            let r = rows.get(at(rows.len())).ok_or("No mapping selected.")?;
            let map = |e: &Event| {
                e.is(ProbeId::UverbsMmap)
                    && e.kind == EventKind::Entry
                    && e.pid == r.pid
                    && e.field("vm_start") == Some(r.start)
            };
            Ok((Topic::Mmap, newest(&map).ok_or_else(|| gone(format!("the mapping at {:#x}", r.start)))?))
        }
        "Completions" => {
            let rows = screens::shown_cqs(m, ui);
            let c = rows.get(at(rows.len())).ok_or("No CQ selected.")?;
            let completion = |e: &Event| {
                e.is(ProbeId::CompHandler)
                    && e.kind == EventKind::Entry
                    && super::model::cq_handle(e) == Some(c.handle)
            };
            let i = newest(&completion).ok_or_else(|| gone(format!("CQ {:#x}", c.handle)))?;
            Ok((Topic::Cq, i))
        }
        "Events" => {
            let shown = screens::shown_events(m, ui);
            let sel = shown.get(at(shown.len())).ok_or("No event selected.")?;
            let Some(topic) = Topic::of_path(sel.path) else {
                return Err(format!(
                    "{} is on no explained path: `e` explains pinning, mmap and completion events \
                     (rdma-trace explain bypass|fork explain the rest from a capture).",
                    sel.name
                ));
            };
            let i = m.events.iter().position(|e| std::ptr::eq(e, *sel)).ok_or("No event selected.")?;
            Ok((topic, i))
        }
        other => Err(format!(
            "`e` explains the selected row of Pinning, Mmap, Completions or Events (screens 2 \
             to 5), not of {other}."
        )),
    }
}

/// The explanation text for the selected row (or why there is none).
pub fn explanation(m: &Model, ui: &Ui) -> String {
    let (topic, anchor) = match chosen(m, ui) {
        Ok(c) => c,
        Err(why) => return why,
    };
    let events: Vec<Event> = m.events.iter().cloned().collect();
    let story = crate::pipeline::correlate::story::build(&events, &[]);
    let header = crate::capture::Header { kernel_release: m.kernel.clone(), ..Default::default() };
    let input =
        Input { events: &events, story: &story, steps: &[], header: Some(&header), anchor: Some(anchor) };
    match explain::explain(topic, &input) {
        Ok(x) => explain::text(&x),
        Err(why) => format!("{}: {why} (among the {} events kept on screen)", topic.title(), events.len()),
    }
}

/// A text over the body (an explanation, or an event whole), scrolled.
pub fn draw(f: &mut Frame, area: Rect, title: &str, text: &str, scroll: u16) {
    f.render_widget(Clear, area);
    f.render_widget(
        Paragraph::new(text.to_string())
            .wrap(Wrap { trim: false })
            .scroll((scroll, 0))
            .block(Block::bordered().title(super::fit::cut(title, area.width.saturating_sub(2)))),
        area,
    );
}
