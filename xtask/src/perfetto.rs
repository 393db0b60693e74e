//! `cargo xtask perfetto-check`: the exports opened where people open them. Each Perfetto
//! JSON is loaded into Perfetto's own UI (offline, in headless chromium) and must import
//! every slice and flow with no stat set; each flame graph SVG is drawn by the same chromium
//! and every frame's label must fit its frame (`perfetto/check.py`, run from the venv setup
//! makes). The committed examples always; with the lab's last run, fresh exports of its
//! captures from every kernel series too.

use crate::util::{self, step};
use anyhow::{Result, bail};
use std::path::Path;
use std::time::SystemTime;

#[derive(clap::Args, Default)]
pub struct PerfettoArgs {
    /// Only the committed examples in docs/examples/ (not the lab's captures).
    #[arg(long)]
    pub examples_only: bool,
    /// (The gate's) every lab capture must be there and written after this.
    #[arg(skip)]
    pub fresh_since: Option<SystemTime>,
}

/// Lab captures exported and checked, under target/lab/out/<series>/: each set is one
/// export (the pair's two hosts merged, their posts' arrows crossing to the other host).
const LAB_CAPTURES: [&[&str]; 3] = [
    &["story/companion.jsonl"],
    &["session/capture.jsonl"],
    &["pair/host1/pair-joined/host1.jsonl", "pair/host2/pair-joined/host2.jsonl"],
];

pub fn run(a: &PerfettoArgs) -> Result<()> {
    let root = util::workspace_root();
    let examples = root.join("docs/examples");
    let mut traces = vec![examples.join("companion-7.3.perfetto.json")];
    let mut svgs = vec![examples.join("companion-7.3.flame.svg")];
    if !a.examples_only {
        let out = root.join("target/perfetto-check");
        std::fs::create_dir_all(&out)?;
        let lab = root.join("target/lab/out");
        let mut found = 0;
        for series in ["trixie", "trixie-backports"] {
            for set in LAB_CAPTURES {
                let inputs: Vec<_> = set.iter().map(|c| lab.join(series).join(c)).collect();
                let mut missing = false;
                for input in &inputs {
                    let written = std::fs::metadata(input).and_then(|m| m.modified()).ok();
                    if let Some(since) = a.fresh_since
                        && written.is_none_or(|w| w < since)
                    {
                        bail!("{} was not written by this lab run", input.display());
                    }
                    missing |= written.is_none();
                }
                if missing {
                    continue;
                }
                found += 1;
                let stem = format!("{series}-{}", set[0].replace(['/', '.'], "-"));
                let (json, svg) = (out.join(format!("{stem}.json")), out.join(format!("{stem}.svg")));
                export(&inputs, &json, &svg)?;
                traces.push(json);
                svgs.push(svg);
            }
        }
        if found == 0 {
            bail!(
                "no lab captures under {} (run `cargo xtask vm-test` first, or --examples-only)",
                lab.display()
            );
        }
    }
    step(&format!(
        "perfetto-check: {} traces in Perfetto's UI, {} flame graphs in chromium",
        traces.len(),
        svgs.len()
    ));
    let mut c = std::process::Command::new(crate::setup::perfetto_python());
    c.arg(root.join("xtask/perfetto/check.py"))
        .arg("--shots")
        .arg(root.join("target/perfetto-check/shots"))
        .args(&traces);
    for s in &svgs {
        c.arg("--svg").arg(s);
    }
    util::run(&mut c)
}

/// `rdma-trace export` of captures (merged), by this build.
fn export(inputs: &[std::path::PathBuf], json: &Path, svg: &Path) -> Result<()> {
    util::run(
        util::cargo()
            .args(["run", "--release", "-q", "-p", "rdma-trace", "--bin", "rdma-trace", "--", "export"])
            .args(inputs)
            .arg("--perfetto")
            .arg(json)
            .arg("--flamegraph")
            .arg(svg),
    )
}
