//! `cargo xtask fuzz`: the capture reader under libFuzzer (`fuzz/`, cargo-fuzz on the
//! nightly toolchain), seeded with real captures, for a bounded time; then every input of
//! the corpus through `story` and `report` with a time limit each (`tests/fuzz_corpus.rs`).
//! The gate runs a short session; a finding fails it and leaves the input in
//! `fuzz/artifacts/reader/`.

use crate::util::{self, step};
use anyhow::Result;

#[derive(clap::Args)]
pub struct FuzzArgs {
    /// How long to fuzz.
    #[arg(long, default_value_t = 60)]
    pub seconds: u32,
}

pub fn run(a: &FuzzArgs) -> Result<()> {
    let root = util::workspace_root();
    // libFuzzer adds what it finds to the first corpus directory: a scratch one under
    // target/, seeded read-only from the committed seeds.
    let corpus = root.join("target/fuzz-corpus/reader");
    std::fs::create_dir_all(&corpus)?;
    step(&format!("fuzz: the capture reader for {} s (seeds: fuzz/seeds/reader)", a.seconds));
    let mut c = std::process::Command::new(crate::setup::cargo_fuzz_path());
    c.current_dir(&root)
        .env("RUSTUP_TOOLCHAIN", "nightly")
        .args(["run", "reader"])
        // cargo-fuzz builds with one codegen unit unless told otherwise (the fastest fuzzing,
        // ~10 min to build the reader's whole crate under ASan on 2 cores). The gate's short
        // session does not need that last factor: 16 units build in parallel.
        .args(["--codegen-units", "16"])
        .arg(&corpus)
        .arg(root.join("fuzz/seeds/reader"))
        .arg("--")
        .arg(format!("-max_total_time={}", a.seconds))
        // Bounded memory is part of what is tested: no single allocation may pass 256 MiB
        // (the reader's longest line is 1 MiB; zstd's decoder window is at most 128 MiB),
        // and the whole process (ASan's shadow and quarantine and the growing corpus
        // included, ~300–500 MB) stays under 1 GiB.
        .arg("-malloc_limit_mb=256")
        .arg("-rss_limit_mb=1024")
        .arg("-max_len=262144")
        .arg("-print_final_stats=1");
    util::run(&mut c)?;
    // The reader's corpus (what libFuzzer found new, and the seeds) through story and
    // report, each input with a time limit: the engine past the reader, in a release build.
    step("fuzz: every input of the corpus through story and report (1 s each at most)");
    let dirs = std::env::join_paths([corpus.clone(), root.join("fuzz/seeds/reader")])?;
    util::run(util::cargo().env("RDMA_TRACE_FUZZ_CORPUS", dirs).args([
        "test",
        "--release",
        "-p",
        "rdma-trace",
        "--test",
        "fuzz_corpus",
        "--",
        "--nocapture",
    ]))
}
