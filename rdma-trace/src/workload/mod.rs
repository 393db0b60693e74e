//! `rdma-trace-workload`: a verbs program that knows its own steps and announces them
//! (docs/workload.md), so rdma-trace can join kernel events to them.
//!
//! One run: open the device, allocate a PD, map and register the MRs, create the completion
//! channel, CQs and two RC QPs connected to each other over the same port (loopback), post
//! RDMA WRITEs and SENDs, wait for each completion (CQ events or busy polling), tear down.
//! libibverbs is loaded at run time (sideway / rdma-mummy-sys), so the binary starts
//! anywhere and says in one line when rdma-core or a device is missing.

pub(crate) mod announce;
pub(crate) mod buffer;
pub mod cli;
pub(crate) mod marker;
pub mod plan;
pub(crate) mod regloop;
pub(crate) mod setup;
pub(crate) mod signals;
pub(crate) mod size;
pub(crate) mod step;
pub(crate) mod teardown;
pub(crate) mod wc;
pub(crate) mod work;

use crate::steps::{Config, StepName};
use announce::{Announcer, Destination, now_ns, timed};
use anyhow::{Context, Result};
use signals::{STOP, install_handlers};
use size::Human;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// What the human sees on stderr after a run.
fn summary(run: u32, cfg: &Config, stats: &work::WorkStats, t0: u64, steps: usize) -> String {
    let sizes: Vec<String> = cfg.mr_sizes.iter().map(|s| Human(*s).to_string()).collect();
    format!(
        "rdma-trace-workload: run {run} ok: {steps} steps, MRs [{}], {} work requests, {} CQ events, {} completions, {} polls, {:.1} ms",
        sizes.join(","),
        stats.work_requests,
        stats.cq_events,
        stats.completions,
        stats.polls,
        (now_ns().saturating_sub(t0)) as f64 / 1e6
    )
}

/// Sleeps `ms` with everything registered (announced as `hold`), stopping early on Ctrl-C.
fn hold(ann: &mut Announcer, ms: u64) -> Result<()> {
    ann.flush().context("writing the announce records")?;
    eprintln!("rdma-trace-workload: holding {ms} ms with the MRs registered (pid {})", ann.ids().0);
    let ((), t) = timed(|| {
        let end = now_ns() + ms * 1_000_000;
        while !STOP.load(Ordering::SeqCst) && now_ns() < end {
            let left = (end - now_ns().min(end)).min(50_000_000);
            std::thread::sleep(Duration::from_nanos(left));
        }
    });
    let mut rec = ann.next(StepName::Hold, t);
    rec.hold_ms = Some(ms);
    ann.emit(&rec)?;
    Ok(())
}

/// One run, open to close.
fn run_once(cfg: &Config, ann: &mut Announcer, run: u32, timeout_s: u32) -> Result<()> {
    ann.begin_run(run);
    let t0 = now_ns();
    let hold_s = u32::try_from(cfg.hold_ms.div_ceil(1000)).unwrap_or(u32::MAX);
    // SAFETY: alarm only arms a timer.
    unsafe { libc::alarm(timeout_s.saturating_add(hold_s)) };
    let mut res = setup::setup(cfg, ann)?;
    let stats = work::run_work(cfg, ann, &mut res)?;
    if cfg.hold_ms > 0 {
        hold(ann, cfg.hold_ms)?;
    }
    teardown::teardown(ann, res, setup::mr_access(cfg))?;
    // SAFETY: as above; 0 disarms.
    unsafe { libc::alarm(0) };
    let steps = ann.names().len();
    ann.flush().context("writing the announce records")?;
    eprintln!("{}", summary(run, cfg, &stats, t0, steps));
    Ok(())
}

/// The whole program; `main` prints the error in one line.
pub fn main_with(args: cli::Args) -> Result<()> {
    let cfg = args.config();
    plan::validate(&cfg)?;
    install_handlers();
    let dest =
        Destination::open(&cfg.announce).with_context(|| format!("opening --announce {}", cfg.announce))?;
    let mut ann = Announcer::new(dest);
    let t = now_ns();
    let mut start = ann.start_record((t, t));
    start.config = Some(cfg.clone());
    start.announce_fd = Some(ann.fd());
    ann.emit(&start)?;
    if args.reg_loop > 0 {
        regloop::run(&cfg, &mut ann, args.reg_loop)?;
        return ann.flush().context("writing the announce records");
    }
    if args.hold_mrs > 0 {
        regloop::hold_many(&cfg, &mut ann, args.hold_mrs)?;
        return ann.flush().context("writing the announce records");
    }
    let mut run = 1;
    loop {
        run_once(&cfg, &mut ann, run, args.timeout_s)?;
        if !cfg.repeat || STOP.load(Ordering::SeqCst) {
            break;
        }
        run += 1;
    }
    ann.flush().context("writing the announce records")?;
    Ok(())
}
