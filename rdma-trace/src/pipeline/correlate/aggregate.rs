//! The numbers `story` does not give, fed event by event beside the story (one engine:
//! `report` is the story's processes plus these): per path, how often and how long; the
//! kernel stacks each path ran on; and the run's own account of loss (its stats and
//! trailer records).

use crate::capture::{SiteCount, Stats, Trailer};
use crate::event::FieldId;
use crate::event::{Event, EventKind, Path, ProbeId};
use std::collections::BTreeMap;

/// Latency samples kept exactly up to this many per distribution; past it, every other
/// one is let go and the stride doubles (percentiles stay close; count, sum and max exact).
pub(crate) const SAMPLES: usize = 1 << 20;

/// A latency distribution: exact count, sum and max; percentiles from the samples kept.
#[derive(Clone, Debug, Default)]
pub struct Dist {
    pub count: u64,
    pub sum_ns: u64,
    pub max_ns: u64,
    samples: Vec<u64>,
    stride: u64,
    /// The fixed buckets a histogram is drawn from (`story::BUCKETS_NS`).
    pub histogram: super::rows::Histogram,
}

impl Dist {
    pub fn observe(&mut self, ns: u64) {
        self.count += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
        self.max_ns = self.max_ns.max(ns);
        self.histogram.observe(ns);
        let stride = self.stride.max(1);
        if self.count.is_multiple_of(stride) {
            self.samples.push(ns);
            if self.samples.len() >= SAMPLES {
                let kept: Vec<u64> = self.samples.iter().copied().step_by(2).collect();
                self.samples = kept;
                self.stride = stride * 2;
            }
        }
    }

    /// Both distributions as one (the samples kept by each, together).
    pub fn merge(&mut self, o: &Dist) {
        self.count += o.count;
        self.sum_ns = self.sum_ns.saturating_add(o.sum_ns);
        self.max_ns = self.max_ns.max(o.max_ns);
        // Each sample stands for `stride` observations: the denser side is thinned to the
        // sparser one's stride first (strides are powers of two), so neither capture weighs
        // more than its share.
        let (mine, theirs) = (self.stride.max(1), o.stride.max(1));
        let stride = mine.max(theirs);
        if mine < stride {
            self.samples = self.samples.iter().copied().step_by((stride / mine) as usize).collect();
        }
        self.samples.extend(o.samples.iter().copied().step_by((stride / theirs) as usize));
        self.stride = stride;
        if self.histogram.counts.is_empty() {
            self.histogram.counts = vec![0; super::rows::BUCKETS_NS.len() + 1];
        }
        for (a, b) in self.histogram.counts.iter_mut().zip(&o.histogram.counts) {
            *a += b;
        }
        self.histogram.count += o.histogram.count;
        self.histogram.sum_ns = self.histogram.sum_ns.saturating_add(o.histogram.sum_ns);
    }

    /// The q-quantile (0..=1), nearest rank.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        let mut v = self.samples.clone();
        v.sort_unstable();
        crate::units::quantile(&v, q)
    }
}

/// One path's numbers.
#[derive(Clone, Debug, Default)]
pub struct PathNumbers {
    /// Entry events of the path's kernel probes (a pin, a mapping, a completion, …).
    pub count: u64,
    /// Per probe: entries seen.
    pub by_probe: BTreeMap<String, u64>,
    /// Time inside the path's main function (entry → return on one thread).
    pub latency: Dist,
    /// Kernel stacks of its entry events, innermost frame first, with how often.
    pub stacks: BTreeMap<Vec<String>, u64>,
    /// Pages the pins took (the umem function's `pages` when it returned a umem).
    pub pages: u64,
}

/// The per-path numbers and the run's loss account.
#[derive(Clone, Debug, Default)]
pub struct Aggregates {
    pub paths: BTreeMap<Path, PathNumbers>,
    /// The last per-site account the capture carried (its trailer's, else its last stats).
    pub sites: Vec<SiteCount>,
    pub trailer: Option<Trailer>,
    /// Records the stream said were lost on the way (loss records, by site and reason).
    pub loss_records: BTreeMap<(crate::capture::LossSite, crate::capture::LossReason), u64>,
    /// Event records read, and companion step records (the trailer's `delivered` counts
    /// both: each came through the ring).
    pub events: u64,
    pub steps: u64,
}

/// A stack by function: `ib_umem_get+0x1a/0x3c0` counts as `ib_umem_get` (one call site
/// more or less is the same path).
pub(crate) fn functions<S: AsRef<str>>(stack: &[S]) -> Vec<String> {
    stack.iter().map(|f| f.as_ref().split('+').next().unwrap_or(f.as_ref()).to_string()).collect()
}

/// The function whose time is a path's latency.
fn timed(e: &Event) -> Option<Path> {
    match e.probe()? {
        ProbeId::UmemGet => Some(Path::Pin),
        ProbeId::UverbsMmap => Some(Path::Mmap),
        ProbeId::CompHandler => Some(Path::Completion),
        ProbeId::UmemRelease => Some(Path::Teardown),
        _ => None,
    }
}

impl PathNumbers {
    pub fn merge(&mut self, o: &PathNumbers) {
        self.count += o.count;
        for (k, v) in &o.by_probe {
            *self.by_probe.entry(k.clone()).or_default() += v;
        }
        self.latency.merge(&o.latency);
        self.pages += o.pages;
        for (k, v) in &o.stacks {
            *self.stacks.entry(k.clone()).or_default() += v;
        }
    }
}

impl Aggregates {
    pub fn event(&mut self, e: &Event) {
        self.events += 1;
        if matches!(e.path, Path::Syscall | Path::Verbs) {
            return;
        }
        let p = self.paths.entry(e.path).or_default();
        match e.kind {
            EventKind::Entry => {
                // The completion path's events are completion events (the handler's, as
                // the story and the TUI count them); the posts and modifies it also takes
                // in are counted by probe beside them.
                if e.path != Path::Completion || e.is(ProbeId::CompHandler) {
                    p.count += 1;
                }
                match p.by_probe.get_mut(e.name.as_str()) {
                    Some(n) => *n += 1,
                    None => _ = p.by_probe.insert(e.name.to_string(), 1),
                }
                if !e.stack.is_empty() {
                    *p.stacks.entry(functions(&e.stack)).or_default() += 1;
                }
            }
            EventKind::Return => {
                if let (Some(path), Some(l)) = (timed(e), e.latency_ns) {
                    self.paths.entry(path).or_default().latency.observe(l);
                }
                let pinned =
                    e.field(FieldId::Umem).is_some_and(|u| crate::pipeline::render::err_ptr(u).is_none());
                if e.is(ProbeId::UmemGet) && pinned {
                    self.paths.entry(Path::Pin).or_default().pages += e.field(FieldId::Pages).unwrap_or(0);
                }
            }
            _ => {}
        }
    }

    pub fn stats(&mut self, s: &Stats) {
        if self.trailer.is_none() {
            self.sites = s.sites.clone();
        }
    }

    pub fn loss(&mut self, l: &crate::capture::Loss) {
        *self.loss_records.entry((l.site.clone(), l.reason.clone())).or_default() += l.count;
    }

    pub fn trailer(&mut self, t: &Trailer) {
        self.sites = t.sites.clone();
        self.trailer = Some(t.clone());
    }

    /// A path's most frequent stacks, most frequent first (ties by the stack).
    pub fn top_stacks(&self, path: Path, n: usize) -> Vec<(&Vec<String>, u64)> {
        let Some(p) = self.paths.get(&path) else { return Vec::new() };
        let mut v: Vec<_> = p.stacks.iter().map(|(s, c)| (s, *c)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        v.truncate(n);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_merge_weighs_each_side_by_what_it_saw() {
        // 4 M fast observations (decimated to a stride of 4) and 20 000 slow ones (all
        // kept): the slow are 0.5 % of what was seen, so the p99 is the fast value.
        let (mut fast, mut slow) = (Dist::default(), Dist::default());
        (0..4 * SAMPLES as u64).for_each(|_| fast.observe(1));
        (0..20_000).for_each(|_| slow.observe(1000));
        fast.merge(&slow);
        assert_eq!(fast.count, 4 * SAMPLES as u64 + 20_000);
        assert_eq!(fast.quantile(0.99), Some(1), "the slow side counted 4× its share");
        assert_eq!(fast.quantile(0.999), Some(1000));
    }

    #[test]
    fn quantiles_are_nearest_rank_and_decimation_keeps_them_close() {
        let mut d = Dist::default();
        for v in 1..=100 {
            d.observe(v);
        }
        assert_eq!((d.quantile(0.5), d.quantile(0.99), d.quantile(1.0)), (Some(50), Some(99), Some(100)));
        assert_eq!((d.count, d.sum_ns, d.max_ns), (100, 5050, 100));
        let mut big = Dist::default();
        let n = (SAMPLES as u64) * 3;
        for v in 0..n {
            big.observe(v);
        }
        assert_eq!(big.count, n);
        let p50 = big.quantile(0.5).unwrap() as f64;
        assert!((p50 / (n as f64 / 2.0) - 1.0).abs() < 0.01, "{p50}");
        assert!(big.samples.len() < SAMPLES);
    }
}
