//! `e` on the Events screen: the explanation of the selected event's path (the same text as
//! `rdma-trace explain`), built from the events the model keeps, anchored on that event.

use super::model::Model;
use super::screens::{Ui, shown_events};
use crate::output::explain::{self, Input};
use crate::plan::lessons::Topic;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::widgets::{Block, Clear, Paragraph, Wrap};

/// The explanation text for the selected event (or why there is none).
pub fn explanation(m: &Model, ui: &Ui) -> String {
    let shown = shown_events(m, ui);
    let Some(sel) = shown.get(ui.selected.min(shown.len().saturating_sub(1))) else {
        return "No event selected.".into();
    };
    let Some(topic) = Topic::of_path(sel.path) else {
        return format!(
            "{} is on no explained path: `e` explains pinning, mmap and completion events \
             (rdma-trace explain bypass|fork explain the rest from a capture).",
            sel.name
        );
    };
    let events: Vec<crate::event::Event> = m.events.iter().cloned().collect();
    let anchor = m.events.iter().position(|e| std::ptr::eq(e, *sel));
    let story = crate::pipeline::correlate::story::build(&events, &[]);
    let header = crate::capture::Header { kernel_release: m.kernel.clone(), ..Default::default() };
    let input = Input { events: &events, story: &story, steps: &[], header: Some(&header), anchor };
    match explain::explain(topic, &input) {
        Ok(x) => explain::text(&x),
        Err(why) => format!("{}: {why} (among the {} events kept on screen)", topic.title(), events.len()),
    }
}

/// The explanation over the body, scrolled.
pub fn draw(f: &mut Frame, area: Rect, text: &str, scroll: u16) {
    f.render_widget(Clear, area);
    f.render_widget(
        Paragraph::new(text.to_string())
            .wrap(Wrap { trim: false })
            .scroll((scroll, 0))
            .block(Block::bordered().title("explain (↑↓ scroll, e or esc close)")),
        area,
    );
}
