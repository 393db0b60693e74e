//! A live run's queued outputs (the text stream, the capture file) as one sink: each record
//! goes to every output, in order, and each output says what its failure does. `trace`
//! stops the run when an output fails (its file is the point of the run); the daemon
//! leaves a failed file behind and serves its subscribers on, counting what the file was
//! not given. Used by both, so the policy and the accounting live in one place.

use crate::capture::{Header, Loss, State, Stats, Trailer};
use crate::event::Event;
use crate::output::queued::Queued;
use crate::sink::Sink;
use crate::steps::StepRecord;
use std::io;
use std::sync::Arc;

/// What an output's failure does to the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnError {
    /// The error is the run's: the fan-out returns it.
    Stop,
    /// The output is left behind: it is given nothing more, and what it was not given is
    /// counted (`Failed::not_given`). The caller hears of it once, from `newly_failed`.
    LeaveBehind,
}

/// An output that failed and was left behind.
#[derive(Debug)]
pub(crate) struct Failed {
    /// The output's name ("capture").
    pub name: String,
    pub error: String,
    /// Records it was not given, the one that failed included (ticks and flushes are not
    /// records).
    pub not_given: u64,
}

struct Output {
    queued: Queued,
    on_error: OnError,
    failed: Option<Failed>,
    /// `failed` has not been handed to the caller yet.
    unsaid: bool,
}

/// Several queued outputs as one sink.
#[derive(Default)]
pub(crate) struct FanOut {
    outputs: Vec<Output>,
}

impl FanOut {
    pub(crate) fn push(&mut self, queued: Queued, on_error: OnError) {
        self.outputs.push(Output { queued, on_error, failed: None, unsaid: false });
    }

    /// The outputs (what each left out, its name).
    pub(crate) fn queued(&self) -> impl Iterator<Item = &Queued> {
        self.outputs.iter().map(|o| &o.queued)
    }

    /// The outputs left behind since the last call, each once.
    pub(crate) fn newly_failed(&mut self) -> Vec<&Failed> {
        let fresh = self.outputs.iter_mut().filter_map(|o| std::mem::take(&mut o.unsaid).then_some(&*o));
        fresh.filter_map(|o| o.failed.as_ref()).collect()
    }

    /// Every output left behind.
    pub(crate) fn failed(&self) -> impl Iterator<Item = &Failed> {
        self.outputs.iter().filter_map(|o| o.failed.as_ref())
    }

    /// One line per output that fell behind: what it left out.
    pub(crate) fn left_out_lines(&self) -> Vec<String> {
        let behind = self.queued().filter(|q| q.dropped > 0);
        behind
            .map(|q| {
                format!(
                    "the {} output fell behind and left out {} records (a loss record in it says where)",
                    q.name(),
                    q.dropped
                )
            })
            .collect()
    }

    /// `f` to every output not left behind; `record`: what `f` hands over is a record (a
    /// tick or a flush is not, and is not counted as not given).
    fn each(&mut self, record: bool, f: impl Fn(&mut Queued) -> io::Result<()>) -> io::Result<()> {
        for o in &mut self.outputs {
            if let Some(failed) = &mut o.failed {
                failed.not_given += u64::from(record);
                continue;
            }
            let Err(e) = f(&mut o.queued) else { continue };
            match o.on_error {
                OnError::Stop => return Err(e),
                OnError::LeaveBehind => {
                    let name = o.queued.name().to_string();
                    o.failed = Some(Failed { name, error: e.to_string(), not_given: u64::from(record) });
                    o.unsaid = true;
                }
            }
        }
        Ok(())
    }
}

impl Sink for FanOut {
    fn header(&mut self, h: &Header) -> io::Result<()> {
        self.each(true, |q| q.header(h))
    }
    fn state(&mut self, st: &State) -> io::Result<()> {
        self.each(true, |q| q.state(st))
    }
    fn event(&mut self, ev: &Arc<Event>) -> io::Result<()> {
        self.each(true, |q| q.event(ev))
    }
    fn step(&mut self, st: &StepRecord) -> io::Result<()> {
        self.each(true, |q| q.step(st))
    }
    fn stats(&mut self, st: &Stats) -> io::Result<()> {
        self.each(true, |q| q.stats(st))
    }
    fn loss(&mut self, l: &Loss) -> io::Result<()> {
        self.each(true, |q| q.loss(l))
    }
    fn trailer(&mut self, t: &Trailer) -> io::Result<()> {
        self.each(true, |q| q.trailer(t))
    }
    fn tick(&mut self) -> io::Result<()> {
        self.each(false, |q| q.tick())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.each(false, |q| q.flush())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink that fails from its `n`th event on, and counts the events it took.
    struct FailsAt(u64, Arc<std::sync::atomic::AtomicU64>);

    impl Sink for FailsAt {
        fn event(&mut self, _ev: &Arc<Event>) -> io::Result<()> {
            let seen = self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            if seen >= self.0 { Err(io::Error::other("disk full")) } else { Ok(()) }
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn fan(
        on_error: OnError,
    ) -> (FanOut, Arc<std::sync::atomic::AtomicU64>, Arc<std::sync::atomic::AtomicU64>) {
        let (bad, good) = (Arc::default(), Arc::<std::sync::atomic::AtomicU64>::default());
        let mut f = FanOut::default();
        f.push(Queued::new("capture", Box::new(FailsAt(2, Arc::clone(&bad))), 1), on_error);
        f.push(Queued::new("text", Box::new(FailsAt(u64::MAX, Arc::clone(&good))), 1), OnError::Stop);
        (f, bad, good)
    }

    /// An output's error reaches the fan-out once its queue has handed the record over:
    /// a flush waits for that.
    fn feed(f: &mut FanOut, n: usize) -> io::Result<()> {
        let line = r#"{"v":1,"ts_ns":1,"kind":"entry","name":"umem_get","path":"pin","pid":1,"tid":1,"comm":"x","cpu":0}"#;
        let ev: Arc<Event> = Arc::new(serde_json::from_str(line).unwrap());
        for _ in 0..n {
            f.event(&ev)?;
            f.flush()?;
        }
        Ok(())
    }

    #[test]
    fn a_stopping_output_stops_the_fan_out_with_its_error() {
        let (mut f, _, _) = fan(OnError::Stop);
        let e = feed(&mut f, 5).unwrap_err();
        assert!(e.to_string().contains("disk full"), "{e}");
        assert_eq!(f.failed().count(), 0);
    }

    #[test]
    fn an_output_left_behind_is_said_once_counted_and_the_others_go_on() {
        let (mut f, bad, good) = fan(OnError::LeaveBehind);
        feed(&mut f, 5).expect("the text output goes on");
        let said: Vec<String> = f.newly_failed().iter().map(|x| x.name.clone()).collect();
        assert_eq!(said, ["capture"]);
        assert!(f.newly_failed().is_empty(), "said once");
        assert_eq!(good.load(std::sync::atomic::Ordering::SeqCst), 5);
        // It failed on its 2nd event, which the flush after it reported; it was given
        // nothing after, and the three events after are counted.
        let failed = f.failed().next().unwrap();
        assert!(failed.error.contains("disk full"), "{}", failed.error);
        assert_eq!(bad.load(std::sync::atomic::Ordering::SeqCst), 2);
        assert_eq!(failed.not_given, 3, "{failed:?}");
    }
}
