//! docs/guides/: one guide per path, written from lab captures of each kernel. Each guide
//! is the explanations of those captures in Markdown: why (the catalog's words), one real
//! occurrence per kernel stage by stage, what differs between the kernels, and what only a
//! hardware NIC shows. Every `##` section quotes values of its captures as code spans
//! (`` `4096` ``), so a reader (and the test) can tell measured numbers from prose.

use super::parts::{Explanation, Stage};
use crate::explain::lessons::{self as L, Topic};
use std::fmt::Write;

/// Every topic's explanation of one capture (or why it has none).
pub(crate) type Explained = Vec<(Topic, Result<Explanation, crate::explain::Missing>)>;

/// What one kernel's captures explain.
pub(crate) struct KernelRun {
    /// `uname -r` of the capture's kernel (its header).
    pub kernel: String,
    /// The companion capture's file name, and every topic's explanation of it.
    pub companion: (String, Explained),
    /// The refused-pin capture's file name and its `mr` explanation.
    pub memlock: Option<(String, Result<Explanation, crate::explain::Missing>)>,
}

impl KernelRun {
    fn get(&self, t: Topic) -> Option<&Explanation> {
        self.companion.1.iter().find(|(tt, _)| *tt == t).and_then(|(_, x)| x.as_ref().ok())
    }
}

pub struct Guide {
    /// The file name under docs/guides/.
    pub file: &'static str,
    pub markdown: String,
}

struct Plan {
    file: &'static str,
    topic: Topic,
    title: &'static str,
    why: &'static [&'static str],
    /// What only hardware shows: the words, then the value of this run that contrasts.
    hardware: &'static str,
    contrast: &'static str,
}

const PLANS: [Plan; 4] = [
    Plan {
        file: "mr-registration.md",
        topic: Topic::Mr,
        title: "MR registration and pinning",
        why: &[L::PIN_WHY, L::PIN_ENOMEM],
        hardware: "On a ConnectX NIC the provider is mlx5_ib_reg_user_mr: it writes the pages' addresses into \
the NIC's translation table (MTT) and creates a memory key (MKey) in the device, and the keys name that MKey. The \
lab has no such NIC: the mlx5 probes attach there but never fire, so their times are not measured here. \
soft-RoCE only keeps the page list in kernel memory.",
        contrast: "pin_ns",
    },
    Plan {
        file: "doorbell-and-queue-mmaps.md",
        topic: Topic::Mmap,
        title: "Doorbell and queue mmaps",
        why: &[L::MMAP_WHY, L::MMAP_OFFSET],
        hardware: L::MMAP_WC,
        contrast: "mappings",
    },
    Plan {
        file: "interrupt-to-completion-event.md",
        topic: Topic::Cq,
        title: "Interrupt to completion event",
        why: &[L::CQ_ARM, L::CQ_CONTEXT, L::CQ_LATER],
        hardware: "On a hardware NIC the chain starts with the completion interrupt (mlx5_eq_comp_int), runs \
the CQ's tasklet in softirq context (mlx5_cq_tasklet_cb → mlx5_ib_cq_comp) and then ib_uverbs_comp_handler. \
soft-RoCE has no interrupt: on the kernels of this guide its tasks run in a kworker, so the handler's context \
and the wakeup latency measured here are soft-RoCE's, not a NIC's.",
        contrast: "wakeup_ns",
    },
    Plan {
        file: "kernel-bypass.md",
        topic: Topic::Bypass,
        title: "Kernel bypass",
        why: &[L::BYPASS_WHY, L::POLL_VS_EVENT],
        hardware: L::BYPASS_HW,
        contrast: "doorbell_writes",
    },
];

/// Every guide, from the runs (one per kernel).
pub(crate) fn guides(runs: &[KernelRun]) -> Vec<Guide> {
    PLANS.iter().map(|p| Guide { file: p.file, markdown: guide(p, runs) }).collect()
}

fn code(v: u64) -> String {
    format!("`{v}`")
}

/// `name `value``: addresses, keys and handles in hex, times also in µs.
fn kv(k: &str, v: u64) -> String {
    if v == u64::MAX {
        format!("{k} `unlimited`")
    } else if ["addr", "key", "handle"].iter().any(|w| k.contains(w)) {
        format!("{k} `{v:#x}`")
    } else if k.ends_with("_ns") {
        format!("{k} {} ({})", code(v), crate::units::duration(v))
    } else {
        format!("{k} {}", code(v))
    }
}

fn guide(p: &Plan, runs: &[KernelRun]) -> String {
    let mut out = String::new();
    let w = &mut out;
    let sources: Vec<String> =
        runs.iter().map(|r| format!("Linux {} (`{}`)", r.kernel, r.companion.0)).collect();
    wl(w, &format!("# {}\n", p.title));
    wl(
        w,
        &format!(
            "_Written by `cargo xtask guides` from captures made in the soft-RoCE lab: {}. Every number below \
is from those captures (in code spans); `rdma-trace explain {}` gives the same for any capture._\n",
            sources.join(", "),
            p.topic.as_str()
        ),
    );
    why(w, p, runs);
    // A paragraph of the catalog is written once: in Why, or at its first stage.
    let mut written: Vec<String> = p.why.iter().map(|t| t.to_string()).collect();
    for r in runs {
        match r.companion.1.iter().find(|(t, _)| *t == p.topic).map(|(_, x)| x) {
            Some(Ok(x)) => occurrence(w, &r.kernel, &r.companion.0, x, &mut written),
            Some(Err(e)) => wl(w, &format!("## Linux {}\n\nNot in this capture: {e}\n", r.kernel)),
            None => {}
        }
        if p.topic == Topic::Mr {
            refused(w, r);
        }
    }
    if p.topic == Topic::Mr {
        fork(w, runs);
    }
    if p.topic == Topic::Bypass {
        modes(w, runs);
    }
    between(w, p.topic, runs);
    hardware(w, p, runs);
    out
}

fn wl(w: &mut String, s: &str) {
    writeln!(w, "{s}").expect("writing into a String cannot fail");
}

fn why(w: &mut String, p: &Plan, runs: &[KernelRun]) {
    wl(w, "## Why\n");
    for t in p.why {
        wl(w, &format!("{t}\n"));
    }
    let seen: Vec<String> = runs
        .iter()
        .filter_map(|r| {
            let x = r.get(p.topic)?;
            let vals: Vec<String> = x.values.iter().map(|(k, v)| kv(k, *v)).collect();
            Some(format!("- Linux {}: {}", r.kernel, vals.join(", ")))
        })
        .collect();
    if !seen.is_empty() {
        wl(w, "In these captures:\n");
        wl(w, &format!("{}\n", seen.join("\n")));
    }
}

fn stage(w: &mut String, i: usize, s: &Stage, written: &mut Vec<String>) {
    wl(w, &format!("### {}. {}\n", i + 1, s.title));
    if !s.seen.is_empty() {
        wl(w, &format!("```text\n{}\n```\n", s.seen.join("\n")));
    }
    for f in &s.functions {
        let file = if f.file.is_empty() { String::new() } else { format!(" in `{}`", f.file) };
        let what = if f.what.is_empty() { String::new() } else { format!(": {}", f.what) };
        wl(w, &format!("- `{}()`{file}{what}", f.function));
    }
    if !s.functions.is_empty() {
        wl(w, "");
    }
    // A text that begins with the catalog's words already given adds only the rest.
    let text =
        written.iter().find_map(|t| s.text.strip_prefix(t.as_str())).map_or(s.text.as_str(), str::trim_start);
    if !text.is_empty() && !written.iter().any(|t| t == text) {
        wl(w, &format!("{text}\n"));
        written.push(text.to_string());
    }
}

fn values_line(x: &Explanation) -> String {
    let v: Vec<String> = x.values.iter().map(|(k, v)| kv(k, *v)).collect();
    format!("The values (`explain --json`): {}.\n", v.join(", "))
}

fn occurrence(w: &mut String, kernel: &str, file: &str, x: &Explanation, written: &mut Vec<String>) {
    wl(w, &format!("## Linux {kernel}: one real occurrence\n"));
    wl(w, &format!("{} (from `{file}`)\n", x.occurrence));
    wl(w, &values_line(x));
    for (i, s) in x.stages.iter().enumerate() {
        stage(w, i, s, written);
    }
    for (head, t) in &x.notes {
        if written.contains(t) {
            // The catalog's words, already given: only a heading that holds this run's count.
            if head.chars().any(|c| c.is_ascii_digit()) {
                wl(w, &format!("**{head}.**\n"));
            }
        } else {
            wl(w, &format!("**{head}.** {t}\n"));
        }
    }
}

fn refused(w: &mut String, r: &KernelRun) {
    let Some((file, x)) = &r.memlock else { return };
    wl(w, &format!("## Linux {}: a pin refused over RLIMIT_MEMLOCK\n", r.kernel));
    let x = match x {
        Ok(x) => x,
        Err(e) => return wl(w, &format!("Not in `{file}`: {e}\n")),
    };
    wl(w, &format!("The companion as `nobody` with `ulimit -l 64`, registering 1 MiB (from `{file}`).\n"));
    for (head, t) in x.notes.iter().filter(|(h, _)| h.starts_with("A pin")) {
        wl(w, &format!("**{head}.** {t}\n"));
    }
    let keys = ["refused_asked_bytes", "refused_memlock_limit", "refused_errno"];
    let v: Vec<String> = keys.iter().filter_map(|k| x.values.get(*k).map(|v| kv(k, *v))).collect();
    wl(w, &format!("The values: {}.\n", v.join(", ")));
}

fn fork(w: &mut String, runs: &[KernelRun]) {
    wl(w, "## fork() and pinned memory\n");
    wl(w, &format!("{}\n\n{}\n", L::FORK_WHY, L::FORK_COW));
    for r in runs {
        let Some(x) = r.get(Topic::Fork) else { continue };
        let said = x.stages.iter().flat_map(|s| &s.seen).last().cloned().unwrap_or_default();
        let (m, d, p) = (x.values.get("madvise"), x.values.get("madvise_dontfork"), x.values.get("pins"));
        wl(
            w,
            &format!(
                "- Linux {}: {} pins, {} madvise calls, {} of them MADV_DONTFORK. {said}",
                r.kernel,
                code(p.copied().unwrap_or(0)),
                code(m.copied().unwrap_or(0)),
                code(d.copied().unwrap_or(0))
            ),
        );
    }
    wl(w, "");
}

fn modes(w: &mut String, runs: &[KernelRun]) {
    wl(w, "## Event mode against busy polling\n");
    for r in runs {
        let Some(x) = r.get(Topic::Bypass) else { continue };
        let reads = x.values.get("channel_reads").copied().unwrap_or(0);
        wl(w, &format!("- Linux {}: {} read(2) on the completion channel.", r.kernel, code(reads)));
    }
    wl(w, &format!("\n{}\n", L::POLL_VS_EVENT));
}

/// The functions one kernel ran on this path and the other did not.
fn between(w: &mut String, topic: Topic, runs: &[KernelRun]) {
    let [a, b] = runs else { return };
    let (Some(xa), Some(xb)) = (a.get(topic), b.get(topic)) else { return };
    wl(w, "## Between the kernels\n");
    let only = |x: &Explanation, y: &Explanation| -> Vec<String> {
        x.functions.iter().filter(|f| !y.functions.contains(f)).map(|f| format!("`{f}()`")).collect()
    };
    let (oa, ob) = (only(xa, xb), only(xb, xa));
    if oa.is_empty() && ob.is_empty() {
        wl(w, "Both kernels ran the same functions on this path.");
    } else {
        let list =
            |v: &[String]| if v.is_empty() { "nothing the other did not".to_string() } else { v.join(", ") };
        wl(w, &format!("- only Linux {}: {}", a.kernel, list(&oa)));
        wl(w, &format!("- only Linux {}: {}", b.kernel, list(&ob)));
    }
    let same: Vec<String> =
        xa.values.iter().filter(|(k, v)| xb.values.get(*k) == Some(v)).map(|(k, v)| kv(k, *v)).collect();
    if !same.is_empty() {
        wl(w, &format!("\nThe same on both: {}.", same.join(", ")));
    }
    wl(w, "");
}

fn hardware(w: &mut String, p: &Plan, runs: &[KernelRun]) {
    wl(w, "## What only real hardware shows\n");
    wl(w, &format!("{}\n", p.hardware));
    for r in runs {
        if let Some(v) = r.get(p.topic).and_then(|x| x.values.get(p.contrast)) {
            wl(w, &format!("- measured here, Linux {} on soft-RoCE: {}", r.kernel, kv(p.contrast, *v)));
        }
    }
    wl(w, "");
}
