//! `e`: the explanation of the selected row's path (the same text as `rdma-trace explain`),
//! asked of the live story and anchored on the row's own event: an MR's pin (Pinning), a
//! mapping's mmap (Mmap), a CQ's latest completion (Completions), or the event itself
//! (Events). The screen chooses the anchor (`chosen`); the pipeline's thread, which owns the
//! story, answers (`answer`) in its next snapshot.

use super::model::Model;
use super::ui::{self, Screen, Ui};
use crate::explain::lessons::Topic;
use crate::explain::{self, Input};
use crate::pipeline::correlate::engine::Engine;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::widgets::{Block, Clear, Paragraph, Wrap};

/// The title of an explanation's box.
pub(crate) const TITLE: &str = "explain (↑↓ scroll, e or esc close)";

/// What the screen asks the story: a topic, anchored on an event (the story's index).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ask {
    pub id: u64,
    pub topic: Topic,
    pub anchor: usize,
    /// The columns the answer is shown in (its text is wrapped to them).
    pub width: u16,
}

/// The narrowest an answer is wrapped to.
pub(crate) const MIN_WIDTH: u16 = 40;

/// Why `e` has nothing to explain on the screen shown (the panel shows the words).
#[derive(Debug, thiserror::Error)]
pub enum Nothing {
    /// "MR", "mapping", "CQ", "event".
    #[error("No {0} selected.")]
    NoneSelected(&'static str),
    #[error(
        "This MR was registered before this viewer joined (it is known from the kernel's \
         tables): its pin was not seen, so there is nothing to explain."
    )]
    MrBeforeJoin,
    #[error(
        "This mapping was made before this viewer joined: its mmap was not seen, so there is \
         nothing to explain."
    )]
    MapBeforeJoin,
    #[error("No completion of this CQ was seen.")]
    NoCompletion,
    /// The event's name.
    #[error(
        "{0} is on no explained path: `e` explains pinning, mmap and completion events \
         (rdma-trace explain bypass|fork explain the rest from a capture)."
    )]
    OffPath(String),
    /// The screen's name.
    #[error(
        "`e` explains the selected row of Pinning, Mmap, Completions or Events (screens 2 to \
         5), not of {0}."
    )]
    Screen(&'static str),
}

/// What `e` explains on the screen shown: a topic and the story's index of the event to
/// anchor it on, or why there is nothing to explain.
pub fn chosen(m: &Model, ui: &Ui) -> Result<(Topic, usize), Nothing> {
    match ui.screen {
        Screen::Pinning => {
            let rows = ui::shown_mrs(m, ui);
            let r = ui.pick(&rows).ok_or(Nothing::NoneSelected("MR"))?;
            Ok((Topic::Mr, r.event.ok_or(Nothing::MrBeforeJoin)?))
        }
        Screen::Mmap => {
            let rows = ui::shown_maps(m, ui);
            let r = ui.pick(&rows).ok_or(Nothing::NoneSelected("mapping"))?;
            Ok((Topic::Mmap, r.event.ok_or(Nothing::MapBeforeJoin)?))
        }
        Screen::Completions => {
            let rows = ui::shown_cqs(m, ui);
            let c = ui.pick(&rows).ok_or(Nothing::NoneSelected("CQ"))?;
            Ok((Topic::Cq, c.latest.ok_or(Nothing::NoCompletion)?))
        }
        Screen::Events => {
            let shown = ui::shown_events(m, ui);
            let sel = ui.pick(&shown).ok_or(Nothing::NoneSelected("event"))?;
            let topic = Topic::of_path(sel.path).ok_or_else(|| Nothing::OffPath(sel.name.to_string()))?;
            Ok((topic, m.index_of(sel).ok_or(Nothing::NoneSelected("event"))?))
        }
        other => Err(Nothing::Screen(other.name())),
    }
}

/// The story's explanation of `ask` (on the pipeline's thread, which owns the story).
pub fn answer(engine: &mut Engine, ask: &Ask, m: &Model) -> String {
    let hosts: Vec<String> = m.hosts.iter().map(|h| h.name.clone()).collect();
    let clock_error_ns = m.hosts.iter().filter_map(|h| h.clock_error_ns).max();
    let (events, story, steps, at) = engine.for_explain(ask.anchor);
    let Some(at) = at else {
        return format!(
            "{}: the event of this row is no longer among the {} the story keeps (the newest); \
             `rdma-trace explain` explains it from a capture.",
            ask.topic.title(),
            events.len()
        );
    };
    let header = crate::capture::Header { kernel_release: m.kernel.clone(), ..Default::default() };
    let calls = crate::pipeline::correlate::calls::Pairs::of(&events);
    let input = Input {
        events: &events,
        calls: &calls,
        story: &story,
        steps: &steps,
        header: Some(&header),
        anchor: Some(at),
        hosts: &hosts,
        clock_error_ns,
        run_counts: None,
    };
    match explain::explain(ask.topic, &input) {
        Ok(x) => explain::text_at(&x, usize::from(ask.width.max(MIN_WIDTH))),
        Err(why) => {
            format!("{}: {why} (among the {} events the story keeps)", ask.topic.title(), events.len())
        }
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
