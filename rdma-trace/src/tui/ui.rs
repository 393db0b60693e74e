//! What the person looking has chosen (the screen, the selected row, the filter, pause,
//! the text open over the screen), and which rows each screen lists under that choice:
//! what is drawn and what `e` and enter act on are the same rows.

use super::model::{CqRow, MapRow, Model, MrRow, StepRow};

/// The screens, in the order of their tabs and number keys.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Screen {
    #[default]
    Overview,
    Pinning,
    Mmap,
    Completions,
    Events,
    Steps,
}

impl Screen {
    /// Every screen, in the order of their keys (1 to 6).
    pub const ALL: [Screen; 6] =
        [Screen::Overview, Screen::Pinning, Screen::Mmap, Screen::Completions, Screen::Events, Screen::Steps];

    /// The screen's name in the tab bar.
    pub const fn name(self) -> &'static str {
        match self {
            Screen::Overview => "Overview",
            Screen::Pinning => "Pinning",
            Screen::Mmap => "Mmap",
            Screen::Completions => "Completions",
            Screen::Events => "Events",
            Screen::Steps => "Steps",
        }
    }

    /// Its place among the tabs, from 0 (its number key is one more).
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// The screen `by` tabs on (negative: back), wrapping around.
    pub(crate) fn turned(self, by: isize) -> Screen {
        let n = Screen::ALL.len() as isize;
        Screen::ALL[(self.index() as isize + by).rem_euclid(n) as usize]
    }
}

/// What the keys act on, one at a time: the screen, the filter being typed, a text or the
/// loss over the screen, or the help box over any of those.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    #[default]
    Normal,
    /// The filter is being typed (`/`).
    Filter,
    /// A text over the screen: an explanation (`e`) or an event whole (enter).
    Text(Panel),
    /// The loss view (`l`): what was lost, by source, site and reason.
    Loss,
    /// The help box (`?`), over the mode it was opened in (which it goes back to).
    Help(Box<Mode>),
}

impl Mode {
    /// The mode under the help box, or this one.
    pub(crate) fn base(&self) -> &Mode {
        match self {
            Mode::Help(under) => under.base(),
            m => m,
        }
    }

    pub(crate) fn base_mut(&mut self) -> &mut Mode {
        match self {
            Mode::Help(under) => under.base_mut(),
            m => m,
        }
    }

    /// The help box over `self`.
    pub fn with_help(self) -> Mode {
        Mode::Help(Box::new(self))
    }
}

/// A text open over the screen: its title when it is not an explanation, how far it is
/// scrolled, and the `e` whose answer it waits for (its text says it is asking).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Panel {
    pub text: String,
    pub title: Option<String>,
    pub scroll: u16,
    pub waiting: Option<u64>,
}

/// What the person looking has chosen: the screen, the selected row, a filter, pause.
#[derive(Clone, Debug, Default)]
pub struct Ui {
    pub screen: Screen,
    pub selected: usize,
    /// Rows whose pid, comm or object (lkey, rkey, CQ handle) contain it.
    pub filter: String,
    pub mode: Mode,
    pub paused: bool,
    /// Replay speed ×10 (10 = real time), for the status line.
    pub speed_x10: Option<u32>,
    /// The last `e` asked of the story (asks are numbered from 1).
    pub asked: Option<u64>,
    /// The Mmap screen leaves out what was unmapped (`u`).
    pub hide_unmapped: bool,
}

impl Ui {
    /// The selected row of a list of `len` rows: the last when the list has shrunk below
    /// the selection, `None` when it is empty.
    pub(crate) fn row(&self, len: usize) -> Option<usize> {
        len.checked_sub(1).map(|last| self.selected.min(last))
    }

    /// The selected item of `rows`.
    pub(crate) fn pick<'a, T>(&self, rows: &'a [T]) -> Option<&'a T> {
        rows.get(self.row(rows.len())?)
    }
}

impl Ui {
    /// Whether a row with these texts passes the filter.
    fn admits(&self, fields: &[String]) -> bool {
        self.filter.is_empty() || fields.iter().any(|f| f.contains(&self.filter))
    }
}

/// The MRs the Pinning screen lists, newest first, filtered: its rows, and what `e`
/// explains.
pub(crate) fn shown_mrs<'a>(m: &'a Model, ui: &Ui) -> Vec<&'a MrRow> {
    let key = |k: Option<u64>| k.map(|k| format!("{k:#x}")).unwrap_or_default();
    m.mrs
        .iter()
        .rev()
        .filter(|r| ui.admits(&[m.tags(r.pid), r.comm.clone(), key(r.lkey), key(r.rkey)]))
        .collect()
}

/// The mappings the Mmap screen lists, newest first, filtered.
/// What is mapped now first (newest first), then what was unmapped (unless hidden).
pub fn shown_maps<'a>(m: &'a Model, ui: &Ui) -> Vec<&'a MapRow> {
    let admitted = m.maps.iter().rev().filter(|r| ui.admits(&[m.tags(r.pid), r.comm.clone()]));
    let (mapped, unmapped): (Vec<&MapRow>, Vec<&MapRow>) = admitted.partition(|r| !r.unmapped);
    if ui.hide_unmapped { mapped } else { mapped.into_iter().chain(unmapped).collect() }
}

/// The CQs the Completions screen lists, filtered.
pub(crate) fn shown_cqs<'a>(m: &'a Model, ui: &Ui) -> Vec<&'a CqRow> {
    m.cqs
        .values()
        .filter(|c| {
            ui.admits(&[format!("{:#x}", c.handle), c.comm.clone(), m.tags(c.pid.unwrap_or_default())])
        })
        .collect()
}

/// The events the Events screen lists, newest first, filtered: with a filter, from what
/// the story's search found among all it keeps (until it answers, the newest held).
pub fn shown_events<'a>(m: &'a Model, ui: &Ui) -> Vec<&'a crate::event::Event> {
    if let Some(f) = m.found.as_ref().filter(|f| !ui.filter.is_empty() && f.filter == ui.filter) {
        return f.events.iter().rev().map(|e| e.as_ref()).collect();
    }
    m.events.iter().rev().map(|e| e.as_ref()).filter(|e| m.matches(&ui.filter, e)).collect()
}

/// The companion's steps the Steps screen lists, newest first, filtered.
pub(crate) fn shown_steps<'a>(m: &'a Model, ui: &Ui) -> Vec<&'a StepRow> {
    m.steps.iter().rev().filter(|s| ui.admits(&[m.tags(s.pid), s.name.clone()])).collect()
}
