//! Planning cost on the real BTF of both lab kernels: vmlinux read eagerly (Cache) vs
//! lazily (Mmap), measured side by side in one run (interleaved rounds, medians, ratio),
//! because these machines are too noisy for absolute timings.
//!
//! `cargo bench -p rdma-trace --bench plan` (unpack the fixtures first: `cargo test -p
//! rdma-trace --test btf_fixtures` does).

use rdma_trace::plan::btf::{Backend, BtfSource};
use rdma_trace::plan::kernel::{Symbols, TpField};
use rdma_trace::plan::select::{self, KernelView};
use std::path::Path;
use std::time::{Duration, Instant};

fn plan_once(dir: &Path, backend: Backend, symbols: &Symbols) -> (Duration, usize) {
    let t0 = Instant::now();
    let mut src = BtfSource::open_with(dir, backend).expect("fixture BTF");
    let tp =
        |_: &str, n: &str| (n == "mr_dereg").then(|| vec![TpField { name: "id".into(), offset: 8, size: 4 }]);
    let plan = select::plan(
        &mut KernelView { symbols, btf: &mut src, tracepoint: &tp, libraries: &Default::default() },
        &[],
    );
    (t0.elapsed(), plan.probes.len())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/fixtures");
    // kallsyms as on the lab kernels (module of each function).
    let syms = |umem: &str, umod: &str| {
        Symbols::parse(&format!(
            "0 T ib_register_device\t[ib_core]\n0 t {umem}\t[{umod}]\n0 t rxe_reg_user_mr\t[rdma_rxe]\n\
             0 t mlx5_ib_reg_user_mr\t[mlx5_ib]\n0 t ib_uverbs_mmap\t[ib_uverbs]\n0 t rxe_mmap\t[rdma_rxe]\n\
             0 t mlx5_ib_mmap\t[mlx5_ib]\n0 t rdma_user_mmap_io\t[ib_core]\n0 t ib_uverbs_comp_handler\t[ib_uverbs]\n\
             0 t ib_umem_release\t[{umod}]\n"
        ))
    };
    println!(
        "{:<28} {:>12} {:>12} {:>12} {:>12} {:>12}",
        "kernel", "cache (ms)", "mmap (ms)", "copy (ms)", "mmap/cache", "copy/cache"
    );
    for (k, s) in [
        ("btf-6.12.118+deb13-amd64", syms("ib_umem_get", "ib_uverbs")),
        ("btf-7.3.4+deb13-amd64", syms("__ib_umem_get_va", "ib_core")),
    ] {
        let dir = root.join(k);
        if !dir.join("vmlinux").exists() {
            eprintln!("{} missing: run `cargo test -p rdma-trace --test btf_fixtures` first", dir.display());
            std::process::exit(2);
        }
        let (mut cache, mut mmap, mut copy) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..7 {
            let (t, n) = plan_once(&dir, Backend::Cache, &s);
            cache.push(t);
            let (t2, n2) = plan_once(&dir, Backend::Mmap, &s);
            mmap.push(t2);
            let (t3, n3) = plan_once(&dir, Backend::Copy, &s);
            copy.push(t3);
            assert_eq!((n, n), (n2, n3), "every backend plans the same probes");
        }
        let (c, m, y) = (median(cache), median(mmap), median(copy));
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "{k:<28} {:>12.1} {:>12.1} {:>12.1} {:>12.2} {:>12.2}",
            ms(c),
            ms(m),
            ms(y),
            ms(m) / ms(c),
            ms(y) / ms(c)
        );
    }
}
