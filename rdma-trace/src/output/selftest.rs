//! `selftest`'s judgement: a run of the companion workload, traced, held against what the
//! TUI would show on each path, and the small file a person attaches to a bug report.
//!
//! Pure: the capture's header, the story the engine joined, the probes that fired and the
//! run's trailer in; checks out. Each check passes, fails, or is not run with why (a
//! soft-RoCE device has no doorbell page and no interrupt). The file says which kernel,
//! driver and firmware it ran on and no address of either side.

use crate::capture::{Header, Trailer};
use crate::event::{ExecContext, ProbeId};
use crate::pipeline::correlate::story::{ProcessStory, StepJoin, Story};
use crate::steps::{StepName, StepRecord};
use std::collections::BTreeMap;

/// The companion's name as the kernel keeps it (`comm`, 15 bytes).
const COMPANION_COMM: &str = "rdma-trace-work";

/// Which driver served the run, as the probes that fired say it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Provider {
    SoftRoce,
    Mlx5,
    Unknown,
}

impl Provider {
    /// The device's driver as sysfs names it (`mlx5_core`; none for a software device), and
    /// for a software device the probes that fired (the kernel probes see every process,
    /// so another device's traffic must not decide).
    pub fn of(driver: Option<&str>, fired: &BTreeMap<ProbeId, u64>) -> Provider {
        let any = |ids: &[ProbeId]| ids.iter().any(|i| fired.contains_key(i));
        match driver {
            Some("mlx5_core") => Provider::Mlx5,
            None if any(&[ProbeId::RxeRegMr, ProbeId::RxeMmap, ProbeId::RxeCreateCq]) => Provider::SoftRoce,
            _ => Provider::Unknown,
        }
    }

    /// The probes each path must fire on this driver for the TUI to show it.
    fn needed(self) -> &'static [(&'static str, &'static [ProbeId])] {
        match self {
            Provider::SoftRoce => &[
                ("pinning", &[ProbeId::UmemGet, ProbeId::RxeRegMr]),
                ("mmap", &[ProbeId::UverbsMmap, ProbeId::RxeMmap]),
                ("completion", &[ProbeId::RxeCreateCq, ProbeId::CompHandler, ProbeId::CompEventRead]),
            ],
            Provider::Mlx5 => &[
                ("pinning", &[ProbeId::UmemGet, ProbeId::Mlx5RegMr]),
                ("mmap", &[ProbeId::UverbsMmap, ProbeId::Mlx5Mmap, ProbeId::MmapIo]),
                ("completion", &[ProbeId::Mlx5CreateCq, ProbeId::CompHandler, ProbeId::CompEventRead]),
            ],
            Provider::Unknown => &[
                ("pinning", &[ProbeId::UmemGet]),
                ("mmap", &[ProbeId::UverbsMmap]),
                ("completion", &[ProbeId::CompHandler, ProbeId::CompEventRead]),
            ],
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Pass,
    Fail,
    NotRun,
}

/// One check: its name, how it came out, and what it saw (counts, sizes, names; never an
/// address).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Judged {
    pub check: &'static str,
    pub outcome: Outcome,
    pub detail: String,
}

fn judged(check: &'static str, ok: bool, detail: String) -> Judged {
    Judged { check, outcome: if ok { Outcome::Pass } else { Outcome::Fail }, detail }
}

fn not_run(check: &'static str, why: &str) -> Judged {
    Judged { check, outcome: Outcome::NotRun, detail: why.to_string() }
}

/// What the run left to judge.
pub struct Run<'a> {
    pub header: &'a Header,
    pub story: &'a Story,
    pub steps: &'a [StepRecord],
    /// Events per catalog probe.
    pub fired: &'a BTreeMap<ProbeId, u64>,
    pub trailer: Option<&'a Trailer>,
    /// Records the loss records of the stream counted.
    pub lost_records: u64,
    /// The device's driver (sysfs), which says the provider.
    pub driver: Option<&'a str>,
}

/// Every check, in the order the TUI's screens go.
pub fn judge(run: &Run) -> (Provider, Vec<Judged>) {
    let provider = Provider::of(run.driver, run.fired);
    let me = companion(run.story);
    let mut out = vec![companion_ran(run), probes(run, provider)];
    match me {
        Some(p) => {
            out.push(mrs(run, p));
            out.extend(mappings(p, provider));
            out.extend(completions(run, p, provider));
        }
        None => out.push(judged("joined", false, "no event of the companion's process was joined".into())),
    }
    out.push(loss(run));
    (provider, out)
}

fn companion(story: &Story) -> Option<&ProcessStory> {
    story.processes.values().filter(|p| p.comm == COMPANION_COMM).max_by_key(|p| p.event_count)
}

fn companion_ran(run: &Run) -> Judged {
    let failed: Vec<String> = run
        .steps
        .iter()
        .filter(|s| !s.ok)
        .map(|s| {
            format!("step {} {:?}: {}", s.step, s.name, no_addresses(s.error.as_deref().unwrap_or("failed")))
        })
        .collect();
    let done = run.steps.iter().any(|s| s.name == StepName::CloseDevice);
    let detail = if failed.is_empty() {
        format!(
            "{} steps announced, each succeeded{}",
            run.steps.len(),
            if done { "" } else { "; it never closed the device" }
        )
    } else {
        format!("{} of {} steps failed: {}", failed.len(), run.steps.len(), failed.join("; "))
    };
    judged("companion", !run.steps.is_empty() && failed.is_empty() && done, detail)
}

/// `s` with every hexadecimal number masked: the report holds no address.
fn no_addresses(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find("0x") {
        out.push_str(&rest[..at]);
        let digits = rest[at + 2..].bytes().take_while(u8::is_ascii_hexdigit).count();
        out.push_str(if digits > 0 { "0x…" } else { "0x" });
        rest = &rest[at + 2 + digits..];
    }
    out.push_str(rest);
    out
}

fn probes(run: &Run, provider: Provider) -> Judged {
    let attached = |id: ProbeId| run.header.probes.iter().any(|p| p.id == id.as_str() && p.attached);
    let mut missing = Vec::new();
    let mut paths = Vec::new();
    for (path, ids) in provider.needed() {
        let silent: Vec<String> = ids
            .iter()
            .filter(|i| !run.fired.contains_key(i))
            .map(|i| {
                if attached(*i) {
                    format!("{i} (attached, never fired)")
                } else {
                    format!("{i} (not attached)")
                }
            })
            .collect();
        paths.push(format!("{path} {}/{}", ids.len() - silent.len(), ids.len()));
        missing.extend(silent);
    }
    let mut detail = format!("{} probes fired (any process); {}", run.fired.len(), paths.join(", "));
    if provider == Provider::Unknown {
        detail.push_str(&format!(
            "; driver {}: the catalog has no probes of its own, only the core's were required",
            run.driver.unwrap_or("unknown")
        ));
    }
    if !missing.is_empty() {
        detail.push_str(&format!("; silent: {}", missing.join(", ")));
    }
    judged("probes", missing.is_empty(), detail)
}

fn mrs(run: &Run, me: &ProcessStory) -> Judged {
    let reg: Vec<&StepJoin> = run
        .story
        .steps
        .iter()
        .filter(|j| run.steps.get(j.step).is_some_and(|s| s.name == StepName::RegMr && s.ok))
        .collect();
    let bad: Vec<String> = reg
        .iter()
        .flat_map(|j| {
            j.checks
                .iter()
                .filter(|c| !c.ok)
                .map(move |c| format!("step {}: {}", run.steps[j.step].step, c.what))
        })
        .collect();
    let unchecked = reg.iter().filter(|j| j.checks.is_empty()).count();
    // The MRs the registrations made, by the pin each step joined; a driver pins its queue
    // buffers with the same function (mlx5's CQ and QP buffers, doorbell records): those
    // rows are counted apart, with no keys to check.
    let theirs = |m: &&crate::pipeline::correlate::rows::MrStory| {
        m.event.is_some_and(|i| reg.iter().any(|j| j.events.contains(&i)))
    };
    let mine: Vec<_> = me.mrs.iter().filter(theirs).collect();
    let others = me.mrs.len() - mine.len();
    let rows: Vec<String> = mine
        .iter()
        .map(|m| {
            let pages = m.pages.map_or("pages unknown".to_string(), |p| crate::units::count(p, "page"));
            let keys = if m.lkey.is_some() && m.rkey.is_some() { "keys" } else { "no keys" };
            format!("{} ({pages}, {keys})", crate::units::bytes(m.length))
        })
        .collect();
    let complete = mine.iter().all(|m| m.pages.is_some() && m.lkey.is_some() && m.rkey.is_some());
    let memlock = match me.memlock_limit {
        Some(u64::MAX) => "memlock limit unlimited".to_string(),
        Some(l) => format!("memlock limit {}", crate::units::bytes(l)),
        None => "memlock limit unknown".to_string(),
    };
    let mut detail = format!(
        "{} registrations announced, {} MRs joined: {}; pinned peak {}; {memlock}",
        reg.len(),
        mine.len(),
        rows.join(", "),
        crate::units::bytes(me.pinned_peak_bytes)
    );
    if others > 0 {
        detail.push_str(&format!("; {} other pins (the driver's queue buffers)", others));
    }
    if !bad.is_empty() {
        detail.push_str(&format!("; differ from the announced: {}", bad.join(", ")));
    }
    if unchecked > 0 {
        detail.push_str(&format!("; {unchecked} registrations joined to no kernel event"));
    }
    let ok = !reg.is_empty()
        && mine.len() == reg.len()
        && bad.is_empty()
        && unchecked == 0
        && complete
        && me.memlock_limit.is_some();
    judged("mrs", ok, detail)
}

fn mappings(me: &ProcessStory, provider: Provider) -> Vec<Judged> {
    let unnamed = me.mappings.iter().filter(|m| !named(m, provider)).count();
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    for m in &me.mappings {
        *kinds.entry(kind_word(m, provider)).or_default() += 1;
    }
    let list: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} ×{n}")).collect();
    let mut detail = format!("{} mappings: {}", me.mappings.len(), list.join(", "));
    if unnamed > 0 {
        detail.push_str(&format!("; {unnamed} not named"));
    }
    let names = judged("mappings", !me.mappings.is_empty() && unnamed == 0, detail);
    let cache = match provider {
        Provider::Mlx5 => {
            let device: Vec<_> = me
                .mappings
                .iter()
                .filter(|m| named(m, provider) && crate::plan::mlx5::device_page(m.pgoff))
                .collect();
            let wrong: Vec<String> = device
                .iter()
                .filter(|m| {
                    !m.cache
                        .as_deref()
                        .is_some_and(|c| c.contains("write-combining") || c.contains("uncached"))
                })
                .map(|m| {
                    format!(
                        "{} mapped {}",
                        kind_word(m, provider),
                        m.cache.as_deref().unwrap_or("(mode unknown)")
                    )
                })
                .collect();
            let modes: BTreeMap<&str, u64> = device.iter().fold(BTreeMap::new(), |mut acc, m| {
                *acc.entry(m.cache.as_deref().unwrap_or("unknown")).or_default() += 1;
                acc
            });
            let modes: Vec<String> = modes.iter().map(|(c, n)| format!("{c} ×{n}")).collect();
            let mut detail = format!("{} device pages (doorbells): {}", device.len(), modes.join(", "));
            if !wrong.is_empty() {
                detail.push_str(&format!("; must be write-combining or uncached: {}", wrong.join(", ")));
            }
            judged("doorbell cache mode", !device.is_empty() && wrong.is_empty(), detail)
        }
        Provider::SoftRoce => not_run(
            "doorbell cache mode",
            "soft-RoCE has no doorbell page: its queues are ordinary memory and a post rings the kernel through write(2)",
        ),
        Provider::Unknown => not_run("doorbell cache mode", "no probe of this driver's mmap in the catalog"),
    };
    vec![names, cache]
}

/// Whether the story knows what a mapping maps: soft-RoCE's queue by its key, mlx5's
/// command as `mlx5_ib_mmap` read it.
fn named(m: &crate::pipeline::correlate::story::MapStory, provider: Provider) -> bool {
    m.queue.is_some()
        || (provider == Provider::Mlx5 && !m.kind.starts_with("offset") && !m.kind.contains("unknown"))
}

/// A mapping's kind in a few words, without its addresses.
fn kind_word(m: &crate::pipeline::correlate::story::MapStory, provider: Provider) -> String {
    if let Some(q) = &m.queue {
        return q.kind.short().to_string();
    }
    if named(m, provider) {
        return crate::plan::mlx5::what(m.pgoff).to_string();
    }
    "unnamed".to_string()
}

fn completions(run: &Run, me: &ProcessStory, provider: Provider) -> Vec<Judged> {
    let cqs: Vec<_> = run.story.cqs.values().filter(|c| c.pid == Some(me.pid)).collect();
    let completed: u64 = cqs.iter().map(|c| c.completions).sum();
    let mut contexts: BTreeMap<String, u64> = BTreeMap::new();
    for c in &cqs {
        for (ctx, n) in &c.by_context {
            *contexts.entry(context_word(ctx.0)).or_default() += n;
        }
    }
    let cq_checks: Vec<&crate::pipeline::correlate::checks::Check> = run
        .story
        .steps
        .iter()
        .filter(|j| {
            run.steps.get(j.step).is_some_and(|s| matches!(s.name, StepName::CreateCq | StepName::GetCqEvent))
        })
        .flat_map(|j| j.checks.iter())
        .collect();
    let bad = cq_checks.iter().filter(|c| !c.ok).count();
    let waited = run.steps.iter().filter(|s| s.name == StepName::GetCqEvent && s.ok).count();
    let ctx: Vec<String> = contexts.iter().map(|(c, n)| format!("{c} {n}")).collect();
    let woke = me.wakeup_latencies_ns.len();
    let detail = format!(
        "{}, {completed} completions handled ({}), {} of {} completion events woke the program; \
         {} of {} CQ checks hold",
        crate::units::count(cqs.len() as u64, "CQ"),
        if ctx.is_empty() { "no context".into() } else { ctx.join(", ") },
        woke.min(waited),
        waited,
        cq_checks.len() - bad,
        cq_checks.len()
    );
    let path = judged(
        "completion path",
        !cqs.is_empty() && completed > 0 && bad == 0 && !cq_checks.is_empty() && woke >= waited,
        detail,
    );
    let irq = match provider {
        Provider::Mlx5 => {
            let from_irq = contexts.get("softirq").copied().unwrap_or(0);
            judged(
                "interrupt context",
                from_irq > 0,
                format!("{from_irq} of {completed} completions handled in interrupt context"),
            )
        }
        Provider::SoftRoce => not_run(
            "interrupt context",
            "soft-RoCE completes in a kworker or a tasklet, never from a device interrupt",
        ),
        Provider::Unknown => {
            not_run("interrupt context", "not judged for a driver the catalog has no probes of")
        }
    };
    vec![path, irq]
}

fn context_word(c: Option<ExecContext>) -> String {
    match c {
        Some(ExecContext::Softirq) => "softirq",
        Some(ExecContext::Kworker) => "kworker",
        Some(ExecContext::Process) => "process",
        None => "unknown",
    }
    .into()
}

fn loss(run: &Run) -> Judged {
    match run.trailer {
        None => judged("loss", false, "the capture has no trailer: the run was cut short".into()),
        Some(t) => {
            let ok = t.lost == 0 && run.lost_records == 0;
            judged(
                "loss",
                ok,
                format!(
                    "{} events delivered, {} lost (any process)",
                    t.delivered,
                    t.lost.max(run.lost_records)
                ),
            )
        }
    }
}

/// The one line that ends the run.
pub fn verdict(device: &str, provider: Provider, kernel: &str, judged: &[Judged]) -> String {
    let count = |o: Outcome| judged.iter().filter(|j| j.outcome == o).count();
    let failed: Vec<&str> = judged.iter().filter(|j| j.outcome == Outcome::Fail).map(|j| j.check).collect();
    let on = format!("{device} ({}, kernel {kernel})", provider_word(provider));
    if failed.is_empty() {
        format!(
            "selftest: PASS on {on}: {} checks passed, {} not run",
            count(Outcome::Pass),
            count(Outcome::NotRun)
        )
    } else {
        format!("selftest: FAIL on {on}: {}", failed.join(", "))
    }
}

fn provider_word(p: Provider) -> &'static str {
    match p {
        Provider::SoftRoce => "soft-RoCE",
        Provider::Mlx5 => "mlx5",
        Provider::Unknown => "provider unknown",
    }
}

/// The device as sysfs describes it (`/sys/class/infiniband/<dev>`): what a bug report
/// needs, nothing that locates memory.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Device {
    pub name: String,
    /// The kernel module behind it (`device/driver/module`; a software device has none).
    pub driver: Option<String>,
    pub fw_ver: Option<String>,
    pub hca_type: Option<String>,
    pub board_id: Option<String>,
    pub node_type: Option<String>,
    pub link_layer: Option<String>,
}

/// The file a person attaches to a bug report.
#[derive(serde::Serialize)]
pub struct Report<'a> {
    pub tool: &'a str,
    pub kernel_release: &'a str,
    pub libibverbs: Option<&'a str>,
    pub device: &'a Device,
    pub provider: Provider,
    pub verdict: &'a str,
    pub checks: &'a [Judged],
    /// Events per probe that fired, and the probes that did not, with why.
    pub fired: BTreeMap<&'static str, u64>,
    pub silent: Vec<Silent>,
}

#[derive(serde::Serialize)]
pub struct Silent {
    pub probe: String,
    /// "attached" (it never fired), or why it was not.
    pub status: String,
}

impl<'a> Report<'a> {
    pub fn new(
        run: &'a Run,
        device: &'a Device,
        provider: Provider,
        verdict: &'a str,
        checks: &'a [Judged],
    ) -> Self {
        let silent = run
            .header
            .probes
            .iter()
            .filter(|p| ProbeId::parse(&p.id).is_some_and(|id| !run.fired.contains_key(&id)))
            .map(|p| Silent {
                probe: p.id.clone(),
                status: if p.attached { "attached".into() } else { p.reason.clone().unwrap_or_default() },
            })
            .collect();
        Report {
            tool: &run.header.tool,
            kernel_release: &run.header.kernel_release,
            libibverbs: run.header.libibverbs.as_deref(),
            device,
            provider,
            verdict,
            checks,
            fired: run.fired.iter().map(|(id, n)| (id.as_str(), *n)).collect(),
            silent,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::correlate::story::MapStory;

    /// An mlx5 mapping as the story makes it: the offset decoded, the cache mode from the
    /// page protection `rdma_user_mmap_io` was given.
    fn mlx5_map(pgoff: u64, cache: &str) -> MapStory {
        MapStory {
            event: None,
            start: 0x7f00_0000_0000,
            end: 0x7f00_0000_1000,
            pgoff,
            kind: crate::plan::mlx5::pgoff(pgoff),
            cache: Some(cache.into()),
            call: None,
            queue: None,
            unmapped: false,
        }
    }

    #[test]
    fn the_device_says_the_provider_not_other_traffic() {
        let rxe_fired: BTreeMap<ProbeId, u64> = [(ProbeId::RxeRegMr, 3), (ProbeId::UmemGet, 3)].into();
        assert_eq!(Provider::of(Some("mlx5_core"), &rxe_fired), Provider::Mlx5);
        assert_eq!(Provider::of(None, &rxe_fired), Provider::SoftRoce);
        assert_eq!(Provider::of(None, &BTreeMap::new()), Provider::Unknown);
        assert_eq!(Provider::of(Some("irdma"), &rxe_fired), Provider::Unknown);
    }

    #[test]
    fn a_step_error_loses_its_addresses() {
        assert_eq!(
            no_addresses("the event names CQ 0x55d0c0ffee00, not 0x55d0c0ffee40 (0x)"),
            "the event names CQ 0x…, not 0x… (0x)"
        );
    }

    #[test]
    fn an_mlx5_doorbell_must_be_write_combining_or_uncached() {
        let mut me = ProcessStory::default();
        me.mappings.push_back(mlx5_map((2 << 8) | 1, "WC (write-combining)"));
        me.mappings.push_back(mlx5_map(3 << 8, "UC- (uncached)"));
        me.mappings.push_back(mlx5_map(7 << 8, "WB (cached)")); // the clock page: not a doorbell
        let [names, cache] = mappings(&me, Provider::Mlx5).try_into().unwrap();
        assert_eq!(names.outcome, Outcome::Pass, "{names:?}");
        assert!(names.detail.contains("UAR/BlueFlame page, write-combining (WC_PAGE) ×1"), "{names:?}");
        assert_eq!(cache.outcome, Outcome::Pass, "{cache:?}");
        assert_eq!(cache.detail, "2 device pages (doorbells): UC- (uncached) ×1, WC (write-combining) ×1");

        me.mappings.push_back(mlx5_map(0, "WB (cached)"));
        let [_, cache] = mappings(&me, Provider::Mlx5).try_into().unwrap();
        assert_eq!(cache.outcome, Outcome::Fail, "{cache:?}");
        assert!(cache.detail.ends_with(
            "must be write-combining or uncached: UAR doorbell page (REGULAR_PAGE, best-effort write-combining) mapped WB (cached)"
        ), "{cache:?}");
    }
}
