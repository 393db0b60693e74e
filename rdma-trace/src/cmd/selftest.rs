//! `rdma-trace selftest`: the companion workload run on a device, traced, and every stage
//! the TUI would show checked (`output::selftest`); one verdict line, and a file without
//! addresses for a bug report.

use crate::capture::{Header, Loss, Trailer};
use crate::event::{Event, ProbeId};
use crate::output::selftest::{self as judge, Device, Report, Run};
use crate::pipeline::correlate::engine::{Engine, Limits, StorySink};
use crate::pipeline::correlate::story::Story;
use crate::sink::Sink;
use crate::steps::StepRecord;
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

/// What a capture of the companion's run holds for judging.
pub struct Gathered {
    pub header: Header,
    pub story: Story,
    pub steps: Vec<StepRecord>,
    pub fired: BTreeMap<ProbeId, u64>,
    pub trailer: Option<Trailer>,
    pub lost_records: u64,
}

impl Gathered {
    /// What to judge, on a device whose driver sysfs names `driver`.
    pub fn run<'a>(&'a self, driver: Option<&'a str>) -> Run<'a> {
        Run {
            driver,
            header: &self.header,
            story: &self.story,
            steps: &self.steps,
            fired: &self.fired,
            trailer: self.trailer.as_ref(),
            lost_records: self.lost_records,
        }
    }
}

/// The story's sink, counting on the way what the story does not keep.
struct Gather {
    story: StorySink,
    header: Option<Header>,
    fired: BTreeMap<ProbeId, u64>,
    trailer: Option<Trailer>,
    lost_records: u64,
}

impl Sink for Gather {
    fn header(&mut self, h: &Header) -> std::io::Result<()> {
        self.header = Some(h.clone());
        self.story.header(h)
    }
    fn event(&mut self, ev: &Arc<Event>) -> std::io::Result<()> {
        if let Some(id) = ev.probe() {
            *self.fired.entry(id).or_default() += 1;
        }
        self.story.event(ev)
    }
    fn step(&mut self, s: &StepRecord) -> std::io::Result<()> {
        self.story.step(s)
    }
    fn loss(&mut self, l: &Loss) -> std::io::Result<()> {
        self.lost_records += l.count;
        self.story.loss(l)
    }
    fn trailer(&mut self, t: &Trailer) -> std::io::Result<()> {
        self.trailer = Some(t.clone());
        self.story.trailer(t)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.story.flush()
    }
}

/// Reads a capture of the companion's run (its steps in it, from the marker).
pub fn gather(capture: &Path) -> Result<Gathered> {
    gather_with(capture, Vec::new())
}

/// Reads a capture with the companion's steps from elsewhere (its announce file, when the
/// marker could not be attached).
pub fn gather_with(capture: &Path, steps: Vec<StepRecord>) -> Result<Gathered> {
    let input =
        crate::source::capture::open(capture).with_context(|| format!("opening {}", capture.display()))?;
    let mut reader = crate::source::capture::Reader::new(input, false);
    let mut g = Gather {
        story: StorySink(Engine::new(steps, Limits::default())),
        header: None,
        fired: BTreeMap::new(),
        trailer: None,
        lost_records: 0,
    };
    crate::pipeline::feed(&mut reader, &mut g)
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", capture.display()))?;
    let header = g.header.with_context(|| format!("{} has no header", capture.display()))?;
    let (story, _kept, steps) = g.story.0.finish();
    Ok(Gathered { header, story, steps, fired: g.fired, trailer: g.trailer, lost_records: g.lost_records })
}

/// The device to test: the one named, or the first one sysfs lists.
fn pick_device(named: Option<&str>) -> Result<String, String> {
    let class = Path::new("/sys/class/infiniband");
    let mut all: Vec<String> = std::fs::read_dir(class)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    all.sort();
    match named {
        Some(n) if all.iter().any(|d| d == n) => Ok(n.to_string()),
        Some(n) => Err(format!(
            "no RDMA device {n} (in /sys/class/infiniband: {})",
            if all.is_empty() { "none".to_string() } else { all.join(", ") }
        )),
        None => all.into_iter().next().ok_or_else(|| {
            "no RDMA device in /sys/class/infiniband (load a driver, or make a soft-RoCE one: \
             rdma link add rxe0 type rxe netdev eth0)"
                .to_string()
        }),
    }
}

/// What sysfs says of `dev`.
fn describe(dev: &str) -> Device {
    let dir = Path::new("/sys/class/infiniband").join(dev);
    let read = |f: &str| {
        std::fs::read_to_string(dir.join(f)).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
    };
    let driver = std::fs::read_link(dir.join("device/driver/module"))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    Device {
        name: dev.to_string(),
        driver,
        fw_ver: read("fw_ver"),
        hca_type: read("hca_type"),
        board_id: read("board_id"),
        node_type: read("node_type"),
        link_layer: read("ports/1/link_layer"),
    }
}

/// `selftest`: exit 0 when every check that can run here passes, 1 when one fails, 2 when
/// the run could not be made.
pub fn run(device: Option<&str>, gid_index: u32, out: &Path) -> Result<i32> {
    if let Err(msg) = crate::live::privilege::check() {
        eprintln!("{msg}");
        return Ok(2);
    }
    let dev = match pick_device(device) {
        Ok(d) => d,
        Err(why) => {
            eprintln!("rdma-trace: {why}");
            return Ok(2);
        }
    };
    let mut device = describe(&dev);
    if device.link_layer.as_deref() == Some("InfiniBand") {
        eprintln!(
            "rdma-trace: {dev} is an InfiniBand port: the companion connects its QPs over RoCE (by GID, \
             no LID), so selftest runs on RoCE and soft-RoCE ports only for now"
        );
        return Ok(2);
    }
    let me = std::env::current_exe().context("where rdma-trace is")?;
    let companion = me.with_file_name("rdma-trace-workload");
    if !companion.exists() {
        eprintln!(
            "rdma-trace: the companion workload is not beside rdma-trace ({} is missing); \
             build it with cargo build --release -p rdma-trace",
            companion.display()
        );
        return Ok(2);
    }
    let work = scratch_dir()?;
    let capture = work.join("capture.jsonl");
    let steps = work.join("steps.jsonl");
    eprintln!("rdma-trace: selftest on {dev}: tracing the companion workload ({})", work.display());
    let st = Command::new(&me)
        .args(["trace", "-q", "-o"])
        .arg(&capture)
        .arg("--")
        .arg(&companion)
        .args(["--device", &dev, "--gid-index", &gid_index.to_string()])
        .args(["--mr-sizes", "4K,64K,1M", "--iterations", "8", "--timeout-s", "60", "--announce"])
        .arg(&steps)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(work.join("trace.out"))?)
        .stderr(std::fs::File::create(work.join("trace.err"))?)
        .status()
        .context("starting rdma-trace trace")?;
    let said = || std::fs::read_to_string(work.join("trace.err")).unwrap_or_default();
    if !capture.exists() {
        eprintln!("rdma-trace: the traced run made no capture ({st}):\n{}", said());
        return Ok(2);
    }
    let mut g = match gather(&capture) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("rdma-trace: the traced run's capture cannot be read: {e:#}\n{}", said());
            return Ok(2);
        }
    };
    if g.steps.is_empty()
        && let Ok(announced) = crate::pipeline::correlate::story::read_steps(&steps)
        && !announced.is_empty()
    {
        // The step marker did not reach the capture (it could not be attached): the
        // companion's own file has the same steps.
        eprintln!("rdma-trace: the capture has no companion steps; joining those of {}", steps.display());
        g = gather_with(&capture, announced).unwrap_or(g);
    }
    let (provider, checks) = judge::judge(&g.run(device.driver.as_deref()));
    if device.driver.is_none() && provider == judge::Provider::SoftRoce {
        // A software device has no PCI function, so sysfs names no module: the probes did.
        device.driver = Some("rdma_rxe".into());
    }
    let verdict = judge::verdict(&dev, provider, &g.header.kernel_release, &checks);
    for c in &checks {
        let mark = match c.outcome {
            judge::Outcome::Pass => "pass",
            judge::Outcome::Fail => "FAIL",
            judge::Outcome::NotRun => "not run",
        };
        println!("  {mark:<8} {:<20} {}", c.check, c.detail);
    }
    let failed = checks.iter().any(|c| c.outcome == judge::Outcome::Fail) || !st.success();
    if !st.success() {
        println!("  (the traced run ended {st}; what it said: {})", work.join("trace.err").display());
    }
    println!("{verdict}");
    let run = g.run(device.driver.as_deref());
    let report = Report::new(&run, &device, provider, &verdict, &checks);
    match serde_json::to_string_pretty(&report)
        .map_err(std::io::Error::from)
        .and_then(|t| std::fs::write(out, t + "\n"))
    {
        Ok(()) => println!("the report to send back: {} (no addresses)", out.display()),
        Err(e) => {
            eprintln!("rdma-trace: cannot write the report {}: {e} (give another with -o)", out.display())
        }
    }
    if failed {
        println!("kept for a closer look (it holds kernel addresses): {}", work.display());
    } else {
        std::fs::remove_dir_all(&work).ok();
    }
    Ok(i32::from(failed))
}

/// A fresh directory of this run's own in the user's private one (the capture holds kernel
/// addresses).
fn scratch_dir() -> Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let stamp =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let dir = super::private_dir()?.join(format!("selftest-{}-{stamp}", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}
