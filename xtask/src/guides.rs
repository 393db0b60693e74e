//! `cargo xtask guides`: the guides in docs/guides/ regenerated from the lab. Runs the
//! `lab_explain` tests on every kernel series (they trace the companion, and a pin refused
//! over RLIMIT_MEMLOCK, to captures), keeps those captures in docs/guides/captures/
//! (zstd), then writes the guides from them (`rdma-trace/examples/guides.rs`).
//! `--last-run` takes the captures of the last lab run (`target/lab/out/`, e.g. the gate's)
//! without booting; `--no-lab` rewrites the guides from the captures already committed.

use crate::lab::{self, Series};
use crate::util::{self, step};
use anyhow::{Context, Result};
use std::process::Command;

#[derive(clap::Args, Default)]
pub struct GuidesArgs {
    /// Write the guides from the captures in docs/guides/captures/ without running the lab.
    #[arg(long, conflicts_with = "last_run")]
    pub no_lab: bool,
    /// Take the captures the last lab run left in target/lab/out/ (no boot).
    #[arg(long)]
    pub last_run: bool,
}

pub fn run(a: &GuidesArgs) -> Result<()> {
    let captures = util::workspace_root().join("docs/guides/captures");
    std::fs::create_dir_all(&captures)?;
    if !a.no_lab {
        if !a.last_run {
            crate::setup::for_lab()?;
            lab::vm_test(lab::VmTestArgs { only: Some("lab_explain".into()), ..Default::default() })?;
        }
        for s in Series::ALL {
            for name in ["companion", "memlock"] {
                let src = lab::out_dir(s).join("explain").join(format!("{name}.jsonl"));
                let dst = captures.join(format!("{}-{name}.jsonl.zst", s.name()));
                step(&format!("guides: {} → {}", src.display(), dst.display()));
                util::run(Command::new("zstd").args(["-q", "-f", "-19"]).arg(&src).arg("-o").arg(&dst))
                    .with_context(|| format!("the lab left no {}", src.display()))?;
            }
        }
    }
    step("guides: writing docs/guides/");
    util::run(
        util::cargo()
            .args(["run", "-q", "-p", "rdma-trace", "--example", "guides", "--"])
            .arg(&captures)
            .arg(util::workspace_root().join("docs/guides")),
    )
}
