//! The TUI: the three paths (pinning, mmap, interrupt → completion event) on screens, live,
//! from a daemon, or replayed from a capture. The only code that knows ratatui.
//!
//! Two threads. The pipeline's thread (whatever feeds events: the tracer, a capture
//! reader, a daemon connection) owns the story (`correlate::engine`) and the `Model`, a view
//! of it, through a `Feeder`, a `Sink`; it makes a snapshot at most every 33 ms and puts it
//! into a slot of one (a newer snapshot replaces an unread one): the event rate never
//! drives redraws, and a slow terminal never slows the pipeline.
//! The screen's thread draws the latest snapshot and answers keys; `Control` carries the
//! keys that steer a replay back.

pub(crate) mod fit;
pub mod format;
pub mod lesson;
pub mod model;
pub(crate) mod overview;
pub mod screens;
pub mod ui;

use crate::capture::{Header, Stats, Trailer};
use crate::event::Event;
use crate::pipeline::correlate::engine::{Engine, Limits};
use crate::sink::Sink;
pub use model::HostLine;
use model::Model;
use ratatui::crossterm::event::KeyCode;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use ui::{Mode, Panel, Screen, Ui};

/// At most this many frames (and snapshots) a second.
pub(crate) const FRAME: Duration = Duration::from_millis(33);

/// What the keys ask of the source.
#[derive(Debug)]
pub struct Control {
    pub paused: AtomicBool,
    /// Replay speed ×10 (10 = as recorded).
    pub speed_x10: AtomicU32,
    /// Events to let through while paused (`n`).
    pub steps: AtomicU32,
    pub restart: AtomicBool,
    pub to_end: AtomicBool,
    pub quit: AtomicBool,
    /// `e`: what the screen asks the story (answered on the pipeline's thread, in the next
    /// snapshot).
    pub asks: std::sync::mpsc::Sender<lesson::Ask>,
    /// The feeder's account: snapshots made, and the time they took on the pipeline's
    /// thread (the view's rows from the story, and handing it over).
    pub snapshots: AtomicU64,
    pub snapshot_ns: AtomicU64,
    /// The filter typed (`/`): the feeder searches every event the story keeps for it.
    pub search: Mutex<String>,
}

impl Control {
    /// The controls, and where the pipeline's thread receives the screen's asks.
    pub fn new() -> (Control, std::sync::mpsc::Receiver<lesson::Ask>) {
        let (asks, rx) = std::sync::mpsc::channel();
        let c = Control {
            paused: AtomicBool::default(),
            speed_x10: AtomicU32::default(),
            steps: AtomicU32::default(),
            restart: AtomicBool::default(),
            to_end: AtomicBool::default(),
            quit: AtomicBool::default(),
            asks,
            snapshots: AtomicU64::default(),
            snapshot_ns: AtomicU64::default(),
            search: Mutex::default(),
        };
        (c, rx)
    }
}

/// The pipeline's side: keeps the model and hands out snapshots.
/// The latest snapshot, waiting for the screen.
pub(crate) type Slot = Arc<Mutex<Option<Model>>>;

/// The pipeline's side of the TUI: takes the stream, keeps the story, hands snapshots over.
pub struct Feeder {
    /// The story every row on screen comes from.
    pub engine: Engine,
    pub model: Model,
    slot: Slot,
    last_sent: Instant,
    /// Events counted at the start of the current rate window.
    window: (Instant, u64),
    pub control: Arc<Control>,
    asks: std::sync::mpsc::Receiver<lesson::Ask>,
    /// The last search made: its filter, the events seen then, and when.
    searched: (String, u64, Instant),
}

/// A search is made again as new events come at most this often.
const SEARCH_EVERY: Duration = Duration::from_millis(250);

impl Feeder {
    /// Sends a snapshot if a frame has passed since the last (`force`: now).
    pub(crate) fn offer(&mut self, force: bool) {
        // Only the newest ask is answered: an older one's panel is gone.
        let ask = self.asks.try_iter().last();
        let force = force || ask.is_some();
        if let Some(ask) = ask {
            let text = lesson::answer(&mut self.engine, &ask, &self.model);
            self.model.answer = Some(model::Answer { id: ask.id, text });
        }
        let now = Instant::now();
        if now.duration_since(self.window.0) >= Duration::from_secs(1) {
            let secs = now.duration_since(self.window.0).as_secs_f64();
            self.model.rate = (self.model.events_total - self.window.1) as f64 / secs;
            self.window = (now, self.model.events_total);
        }
        if !force && now.duration_since(self.last_sent) < FRAME {
            return;
        }
        self.last_sent = now;
        if self.control.paused.load(Ordering::Relaxed) {
            // A paused replay steps event by event: each one is joined as it comes.
            self.engine.flush();
        }
        let t = Instant::now();
        self.model.rows_from(&self.engine);
        self.search(now);
        let snapshot = self.model.clone();
        if let Ok(mut s) = self.slot.lock() {
            *s = Some(snapshot);
        }
        self.control.snapshots.fetch_add(1, Ordering::Relaxed);
        self.control.snapshot_ns.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    /// Searches again when the filter changed, or new events came and the last search is
    /// `SEARCH_EVERY` old.
    fn search(&mut self, now: Instant) {
        let filter = self.control.search.lock().map(|s| s.clone()).unwrap_or_default();
        let (last, seen, at) = &self.searched;
        let changed = *last != filter;
        let newer = *seen != self.model.events_total && now.duration_since(*at) >= SEARCH_EVERY;
        if changed || (newer && !filter.is_empty()) {
            self.model.search(&self.engine, &filter);
            self.searched = (filter, self.model.events_total, now);
        }
    }

    /// The source ended (`why`): shown until the person quits.
    pub(crate) fn finished(&mut self, why: String) {
        self.engine.flush();
        self.model.finished = Some(why);
        self.offer(true);
    }

    /// Starts over (a replay from the start).
    pub(crate) fn reset(&mut self) {
        let source = std::mem::take(&mut self.model.source);
        self.model = Model::new(source);
        self.engine = Engine::new(Vec::new(), limits());
        self.window = (Instant::now(), 0);
        self.searched = (String::new(), 0, Instant::now());
    }
}

impl Sink for Feeder {
    fn header(&mut self, h: &Header) -> std::io::Result<()> {
        self.model.header(h);
        self.offer(true);
        Ok(())
    }
    /// A daemon's state when this viewer joined: what was pinned and mapped before.
    fn state(&mut self, st: &crate::capture::State) -> std::io::Result<()> {
        self.engine.seed(st);
        self.offer(true);
        Ok(())
    }
    fn event(&mut self, ev: &std::sync::Arc<Event>) -> std::io::Result<()> {
        let index = self.engine.push(ev.clone());
        self.model.event(ev, index);
        self.offer(false);
        Ok(())
    }
    fn step(&mut self, s: &crate::steps::StepRecord) -> std::io::Result<()> {
        self.engine.add_steps(vec![s.clone()]);
        self.offer(false);
        Ok(())
    }
    fn stats(&mut self, s: &Stats) -> std::io::Result<()> {
        // The source's clock: what waited in the reorder window long enough is joined.
        self.engine.settle(s.ts_ns);
        self.model.stats(&s.sites);
        Ok(())
    }
    fn loss(&mut self, l: &crate::capture::Loss) -> std::io::Result<()> {
        self.model.loss(l);
        self.offer(true);
        Ok(())
    }
    fn trailer(&mut self, t: &Trailer) -> std::io::Result<()> {
        self.model.stats(&t.sites);
        self.model.lost_total = t.lost;
        self.finished(format!("stopped on {}", t.stopped));
        Ok(())
    }
    fn tick(&mut self) -> std::io::Result<()> {
        self.offer(false);
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.offer(true);
        Ok(())
    }
}

/// A feeder for `source` and the slot the screen takes snapshots from.
pub fn channel(source: String, replay: bool) -> (Feeder, Slot) {
    let slot: Slot = Arc::new(Mutex::new(None));
    let (control, asks) = Control::new();
    let control = Arc::new(control);
    control.speed_x10.store(if replay { 10 } else { 0 }, Ordering::Relaxed);
    let now = Instant::now();
    let model = Model::new(source);
    let engine = Engine::new(Vec::new(), limits());
    let searched = (String::new(), 0, now);
    (
        Feeder {
            engine,
            model,
            slot: slot.clone(),
            last_sent: now - FRAME,
            window: (now, 0),
            control,
            asks,
            searched,
        },
        slot,
    )
}

/// The story's bounds on screen: the daemon's, with a shorter reorder window (records of
/// one ring are out of order by microseconds, so 100 ms is ample and rows show promptly).
pub(crate) fn limits() -> Limits {
    Limits { reorder_ns: 100_000_000, ..Limits::default() }
}

impl Feeder {
    /// Answers the screen until it quits (a source that ended: its story stays asked).
    pub(crate) fn serve_until_quit(&mut self) {
        while !self.control.quit.load(Ordering::Relaxed) {
            self.offer(false);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Everything fed is joined (nothing later is waited for) and shown.
    pub fn caught_up(&mut self) {
        self.engine.flush();
        self.offer(true);
    }
}

/// Set by SIGTERM: the screen restores the terminal and quits.
static TERMINATED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigterm(_: libc::c_int) {
    TERMINATED.store(true, Ordering::Relaxed);
}

/// Puts the terminal back as it was (raw mode off, main screen, cursor shown).
pub(crate) fn restore() {
    use ratatui::crossterm::{cursor, execute, terminal};
    terminal::disable_raw_mode().ok();
    execute!(std::io::stdout(), terminal::LeaveAlternateScreen, cursor::Show).ok();
}

/// How the screen kept up: frames drawn over how long, and for each key the time from it
/// being read to the frame that showed its effect being drawn.
#[derive(Debug, Default)]
pub(crate) struct Frames {
    pub drawn: u64,
    pub took: Duration,
    pub keys: Vec<Duration>,
    /// The feeder's snapshots, and their time on the pipeline's thread.
    pub snapshots: u64,
    pub snapshot_ns: u64,
}

impl std::fmt::Display for Frames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secs = self.took.as_secs_f64().max(1e-9);
        write!(f, "{} frames in {secs:.1} s ({:.1}/s)", self.drawn, self.drawn as f64 / secs)?;
        let mut k = self.keys.clone();
        k.sort_unstable();
        if let (Some(mid), Some(max)) = (k.get(k.len() / 2), k.last()) {
            let ms = |d: &Duration| d.as_secs_f64() * 1e3;
            write!(f, "; {} keys answered: median {:.1} ms, longest {:.1} ms", k.len(), ms(mid), ms(max))?;
        }
        if self.snapshots > 0 {
            let each = self.snapshot_ns as f64 / self.snapshots as f64 / 1e3;
            write!(f, "; {} snapshots, {each:.0} µs each on the pipeline's thread", self.snapshots)?;
        }
        Ok(())
    }
}

/// The screen: draws the latest snapshot and answers keys until `q` (or SIGTERM). The terminal is restored on every way
/// out, a panic included. Says how it kept up.
pub(crate) fn screen(slot: Slot, control: Arc<Control>, replay: bool) -> std::io::Result<Frames> {
    use ratatui::crossterm::event::{self, Event as Input, KeyEventKind};
    use ratatui::crossterm::{execute, terminal};
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore();
        hook(info);
    }));
    // SAFETY: installing a handler that only stores to an atomic (async-signal-safe).
    unsafe { libc::signal(libc::SIGTERM, on_sigterm as *const () as libc::sighandler_t) };
    terminal::enable_raw_mode()?;
    execute!(std::io::stdout(), terminal::EnterAlternateScreen)?;
    let mut term = ratatui::Terminal::new(ratatui::backend::CrosstermBackend::new(std::io::stdout()))?;
    let mut ui = Ui { speed_x10: replay.then_some(10), ..Default::default() };
    let mut model = Model::default();
    // Live and paused: the rows shown hold still while the counts go on (a replay's source
    // stops instead, and `n` steps it, so a replay shows every snapshot).
    let mut held = false;
    let mut frames = Frames::default();
    let (t0, mut key_read) = (Instant::now(), None::<Instant>);
    let result = (|| -> std::io::Result<()> {
        loop {
            ui.paused = control.paused.load(Ordering::Relaxed);
            if let Some(m) = slot.lock().ok().and_then(|mut s| s.take()) {
                if held && ui.paused {
                    model.counts_from(&m);
                } else {
                    model = m;
                }
                // The story's answer to the `e` still open.
                if let (Some(a), Mode::Text(p)) = (&model.answer, ui.mode.base_mut())
                    && p.waiting == Some(a.id)
                {
                    (p.text, p.waiting) = (a.text.clone(), None);
                }
            }
            held = ui.paused && !replay;
            term.draw(|f| screens::draw(f, &model, &ui))?;
            frames.drawn += 1;
            if let Some(t) = key_read.take() {
                frames.keys.push(t.elapsed());
            }
            if TERMINATED.load(Ordering::Relaxed) {
                return Ok(());
            }
            if !event::poll(FRAME)? {
                continue;
            }
            let Input::Key(k) = event::read()? else { continue };
            if k.kind != KeyEventKind::Press {
                continue;
            }
            key_read = Some(Instant::now());
            if key(k.code, &mut ui, &model, &control, replay) {
                return Ok(());
            }
            // The filter typed is searched for by the feeder, in all the story keeps.
            if let Ok(mut s) = control.search.lock()
                && *s != ui.filter
            {
                s.clone_from(&ui.filter);
            }
        }
    })();
    frames.took = t0.elapsed();
    frames.snapshots = control.snapshots.load(Ordering::Relaxed);
    frames.snapshot_ns = control.snapshot_ns.load(Ordering::Relaxed);
    control.quit.store(true, Ordering::Relaxed);
    restore();
    result.map(|()| frames)
}

/// One key, handled by the mode it comes in: what it changes; true for `q`.
fn key(code: KeyCode, ui: &mut Ui, model: &Model, control: &Control, replay: bool) -> bool {
    match ui.mode {
        Mode::Help(_) => help_key(code, ui),
        Mode::Loss => loss_key(code, ui),
        Mode::Text(_) => text_key(code, ui),
        Mode::Filter => filter_key(code, ui),
        Mode::Normal => normal_key(code, ui, model, control, replay),
    }
}

/// The help box is on top of everything: it answers only its own keys, and closes onto
/// the mode it was opened in.
fn help_key(code: KeyCode, ui: &mut Ui) -> bool {
    match code {
        KeyCode::Char('q') => return true,
        KeyCode::Esc | KeyCode::Char('?') => {
            if let Mode::Help(under) = std::mem::take(&mut ui.mode) {
                ui.mode = *under;
            }
        }
        _ => {}
    }
    false
}

fn loss_key(code: KeyCode, ui: &mut Ui) -> bool {
    match code {
        KeyCode::Char('q') => return true,
        KeyCode::Char('?') => ui.mode = std::mem::take(&mut ui.mode).with_help(),
        KeyCode::Esc | KeyCode::Char('l') => ui.mode = Mode::Normal,
        _ => {}
    }
    false
}

/// A text over the screen: scrolled, closed, or the help box opened over it.
fn text_key(code: KeyCode, ui: &mut Ui) -> bool {
    let Mode::Text(p) = &mut ui.mode else { return false };
    match code {
        KeyCode::Char('q') => return true,
        KeyCode::Char('?') => {
            ui.mode = std::mem::take(&mut ui.mode).with_help();
            return false;
        }
        KeyCode::Esc | KeyCode::Char('e') | KeyCode::Enter => {
            ui.mode = Mode::Normal;
            return false;
        }
        KeyCode::Down | KeyCode::Char('j') => p.scroll = p.scroll.saturating_add(1),
        KeyCode::Up | KeyCode::Char('k') => p.scroll = p.scroll.saturating_sub(1),
        KeyCode::PageDown => p.scroll = p.scroll.saturating_add(10),
        KeyCode::PageUp => p.scroll = p.scroll.saturating_sub(10),
        _ => {}
    }
    // Scrolling stops with the last line still on screen.
    let last = p.text.lines().count().saturating_sub(1);
    p.scroll = p.scroll.min(u16::try_from(last).unwrap_or(u16::MAX));
    false
}

fn filter_key(code: KeyCode, ui: &mut Ui) -> bool {
    match code {
        KeyCode::Enter | KeyCode::Esc => ui.mode = Mode::Normal,
        KeyCode::Backspace => {
            ui.filter.pop();
        }
        KeyCode::Char(c) => ui.filter.push(c),
        _ => {}
    }
    false
}

/// The screen's own keys: screens, selection, the modes' openings, replay control.
fn normal_key(code: KeyCode, ui: &mut Ui, model: &Model, control: &Control, replay: bool) -> bool {
    match code {
        KeyCode::Char('q') => return true,
        KeyCode::Tab => (ui.screen, ui.selected) = (ui.screen.turned(1), 0),
        KeyCode::BackTab => (ui.screen, ui.selected) = (ui.screen.turned(-1), 0),
        KeyCode::Char(c @ '1'..='6') => {
            (ui.screen, ui.selected) = (Screen::ALL[c as usize - '1' as usize], 0)
        }
        KeyCode::Down | KeyCode::Char('j') => ui.selected += 1,
        KeyCode::Up | KeyCode::Char('k') => ui.selected = ui.selected.saturating_sub(1),
        KeyCode::Char('/') => {
            ui.filter.clear();
            ui.mode = Mode::Filter;
        }
        KeyCode::Esc => ui.filter.clear(),
        KeyCode::Char('?') => ui.mode = Mode::Normal.with_help(),
        KeyCode::Char('l') => ui.mode = Mode::Loss,
        KeyCode::Char('u') if ui.screen == Screen::Mmap => {
            (ui.hide_unmapped, ui.selected) = (!ui.hide_unmapped, 0);
        }
        KeyCode::Char('e') => {
            let panel = match lesson::chosen(model, ui) {
                Ok((topic, anchor)) => {
                    let id = ui.asked.map_or(1, |a| a + 1);
                    // The panel spans the terminal, less its two borders: the text is
                    // wrapped to that, not to the 88 columns of the command line's.
                    let cols = ratatui::crossterm::terminal::size().map_or(90, |(w, _)| w);
                    let width = cols.saturating_sub(2).max(lesson::MIN_WIDTH);
                    // A pipeline gone (its thread ended) answers nothing: the panel says so.
                    let text = match control.asks.send(lesson::Ask { id, topic, anchor, width }) {
                        Ok(()) => format!("{}: asking the story…", topic.title()),
                        Err(_) => format!("{}: the story is no longer there to ask", topic.title()),
                    };
                    ui.asked = Some(id);
                    Panel { text, waiting: Some(id), ..Default::default() }
                }
                Err(why) => Panel { text: why.to_string(), ..Default::default() },
            };
            ui.mode = Mode::Text(panel);
        }
        KeyCode::Enter if ui.screen == Screen::Events => {
            let shown = ui::shown_events(model, ui);
            if let Some(e) = ui.pick(&shown) {
                let title = format!("the {} event, all of it (↑↓ scroll, enter or esc close)", e.name);
                let text = screens::event_detail(model, e).join("\n");
                ui.mode = Mode::Text(Panel { text, title: Some(title), ..Default::default() });
            }
        }
        KeyCode::Char(' ') => {
            control.paused.fetch_xor(true, Ordering::Relaxed);
        }
        KeyCode::Char('n') => {
            control.steps.fetch_add(1, Ordering::Relaxed);
        }
        KeyCode::Char(c @ ('+' | '-')) if replay => {
            let now = control.speed_x10.load(Ordering::Relaxed);
            let s = if c == '+' { (now * 2).min(1000) } else { (now / 2).max(1) };
            control.speed_x10.store(s, Ordering::Relaxed);
            ui.speed_x10 = Some(s);
        }
        KeyCode::Char('g') => control.restart.store(true, Ordering::Relaxed),
        KeyCode::Char('G') => control.to_end.store(true, Ordering::Relaxed),
        _ => {}
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::crossterm::event::KeyCode;

    #[test]
    fn scrolling_an_open_text_stops_at_its_last_line() {
        let text = "a\nb\nc".to_string();
        let mut ui = Ui { mode: Mode::Text(Panel { text, ..Default::default() }), ..Default::default() };
        let (m, c) = (Model::default(), Control::new().0);
        for _ in 0..10 {
            key(KeyCode::Down, &mut ui, &m, &c, false);
        }
        let scroll = |ui: &Ui| match &ui.mode {
            Mode::Text(p) => p.scroll,
            m => panic!("the text closed: {m:?}"),
        };
        assert_eq!(scroll(&ui), 2, "the last line stays on screen");
        key(KeyCode::Up, &mut ui, &m, &c, false);
        assert_eq!(scroll(&ui), 1, "one key back up, not ten");
        key(KeyCode::PageDown, &mut ui, &m, &c, false);
        assert_eq!(scroll(&ui), 2);
        // The help box opens over the text and closes back onto it, as it was.
        key(KeyCode::Char('?'), &mut ui, &m, &c, false);
        assert!(matches!(ui.mode, Mode::Help(_)));
        key(KeyCode::Char('j'), &mut ui, &m, &c, false);
        key(KeyCode::Esc, &mut ui, &m, &c, false);
        assert_eq!(scroll(&ui), 2);
        key(KeyCode::Esc, &mut ui, &m, &c, false);
        assert_eq!(ui.mode, Mode::Normal);
    }
}
