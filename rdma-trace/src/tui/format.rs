//! How the screens write a cell: boxes with titles that fit, durations, sizes.

use super::fit;
use ratatui::layout::Rect;
use ratatui::widgets::Block;

/// A bordered box whose title fits it (cut with `…` when the box is narrow).
pub(crate) fn titled(title: &str, area: Rect) -> Block<'static> {
    Block::bordered().title(fit::cut(title, area.width.saturating_sub(2)))
}

/// A duration as the screens write it (`-` when there is none yet).
pub fn ns(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), crate::units::duration_compact)
}

pub use crate::units::bytes_compact as bytes;
