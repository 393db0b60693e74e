//! `--reg-loop N`: what one `ibv_reg_mr` + `ibv_dereg_mr` pair costs, timed by the program
//! itself (`cargo xtask bench` compares it with and without a tracer). Opens the device and
//! a PD, maps one buffer per `--mr-sizes` entry, then registers and deregisters it N times.

use super::announce::{Announcer, now_ns};
use super::buffer::Buffer;
use super::setup::{mr_access, open};
use super::size::Human;
use crate::steps::Config;
use anyhow::{Result, anyhow};
use std::sync::atomic::Ordering;

/// One size's pairs, in ns each, sorted.
pub(crate) struct Timing {
    pub size: u64,
    pub pairs_ns: Vec<u64>,
}

impl Timing {
    /// The nearest-rank quantile `q` (0..=1) of the pair times.
    pub(crate) fn quantile(&self, q: f64) -> u64 {
        crate::units::quantile(&self.pairs_ns, q).unwrap_or(0)
    }

    /// The line the bench reads: `reg-loop size=… pairs=… p10_ns=… median_ns=… p90_ns=…`.
    pub(crate) fn line(&self) -> String {
        format!(
            "rdma-trace-workload: reg-loop size={} pairs={} p10_ns={} median_ns={} p90_ns={} ({:.1} µs a pair)",
            self.size,
            self.pairs_ns.len(),
            self.quantile(0.1),
            self.quantile(0.5),
            self.quantile(0.9),
            self.quantile(0.5) as f64 / 1e3,
        )
    }
}

/// Runs the loop for each size; stops early (with what it timed) on Ctrl-C.
pub(crate) fn run(cfg: &Config, ann: &mut Announcer, pairs: u32) -> Result<Vec<Timing>> {
    let (ctx, _, _) = open(cfg, ann)?;
    let pd = ctx.alloc_pd().map_err(|e| anyhow!("ibv_alloc_pd: {e}"))?;
    let access = mr_access(cfg);
    let mut out = Vec::new();
    for &size in &cfg.mr_sizes {
        let len = usize::try_from(size).map_err(|_| anyhow!("MR size {size} does not fit this machine"))?;
        let buf = Buffer::map(len, cfg.hugepages)?;
        let mut t = Timing { size, pairs_ns: Vec::with_capacity(pairs as usize) };
        for _ in 0..pairs {
            if super::signals::STOP.load(Ordering::SeqCst) {
                break;
            }
            let t0 = now_ns();
            // SAFETY: `buf` is mapped for `len` bytes and outlives the MR, dropped (and so
            // deregistered) in this iteration.
            let mr = unsafe { pd.reg_mr(buf.addr() as usize, len, access) }
                .map_err(|e| anyhow!("ibv_reg_mr of {}: {e}", Human(size)))?;
            drop(mr);
            t.pairs_ns.push(now_ns().saturating_sub(t0));
        }
        t.pairs_ns.sort_unstable();
        eprintln!("{}", t.line());
        out.push(t);
    }
    Ok(out)
}

/// `--hold-mrs N`: registers N MRs over each `--mr-sizes` buffer (one buffer per size,
/// registered again and again: the kernel pins its pages once more for each), says so on
/// stderr, holds them for `--hold-ms` (until Ctrl-C or SIGTERM without it), then
/// deregisters them all. What a storage or KV-cache engine with many MRs looks like to a
/// late viewer. Returns the MRs registered.
pub(crate) fn hold_many(cfg: &Config, ann: &mut Announcer, n: u32) -> Result<u64> {
    let (ctx, _, _) = open(cfg, ann)?;
    let pd = ctx.alloc_pd().map_err(|e| anyhow!("ibv_alloc_pd: {e}"))?;
    let access = mr_access(cfg);
    let t0 = now_ns();
    let mut bufs = Vec::new();
    for &size in &cfg.mr_sizes {
        let len = usize::try_from(size).map_err(|_| anyhow!("MR size {size} does not fit this machine"))?;
        bufs.push((Buffer::map(len, cfg.hugepages)?, len, size));
    }
    let mut mrs = Vec::with_capacity(n as usize * bufs.len());
    for (buf, len, size) in &bufs {
        for i in 0..n {
            if super::signals::STOP.load(Ordering::SeqCst) {
                break;
            }
            // SAFETY: `buf` is mapped for `len` bytes and outlives every MR over it (the MRs
            // are dropped, and so deregistered, before the buffers).
            let mr = unsafe { pd.reg_mr(buf.addr() as usize, *len, access) }
                .map_err(|e| anyhow!("ibv_reg_mr {} of {} ({i} held): {e}", i + 1, Human(*size)))?;
            mrs.push(mr);
        }
    }
    let held = mrs.len() as u64;
    eprintln!(
        "rdma-trace-workload: holding {held} MRs (pid {}), registered in {:.1} s",
        std::process::id(),
        now_ns().saturating_sub(t0) as f64 / 1e9
    );
    let end = (cfg.hold_ms > 0).then(|| now_ns() + cfg.hold_ms * 1_000_000);
    while !super::signals::STOP.load(Ordering::SeqCst) && end.is_none_or(|e| now_ns() < e) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    drop(mrs);
    drop(bufs);
    Ok(held)
}
