//! Planning on this machine: the catalog against the running kernel's symbols and BTF and
//! the installed libibverbs. Shared by `trace` and `probes`.

use crate::plan::btf::BtfSource;
use crate::plan::catalog::{CATALOG, Kind};
use crate::plan::kernel::{self, Symbols};
use crate::plan::mlx5;
use crate::plan::select::{self, KernelView, Library, LibraryError, Plan, Skipped};
use std::collections::HashMap;
use std::time::{Duration, Instant};

pub(crate) struct Planning {
    /// /proc/kallsyms as read once for planning (the stack symbolizer reuses it).
    pub kallsyms: String,
    pub plan: Plan,
    /// Why no plan could be made at all (no RDMA stack, no BTF).
    pub blocked: Option<String>,
    /// The mlx5 mmap numbers rdma-trace decodes, held against this kernel's mlx5_ib
    /// (none when blocked).
    pub mlx5: Option<mlx5::Check>,
    pub took: Duration,
}

/// Resolves the plan for the running kernel (no privileges needed beyond reading
/// /proc/kallsyms and /sys/kernel/btf).
pub(crate) fn plan_here(wanted: &[&str]) -> Planning {
    let t0 = Instant::now();
    let kallsyms = match std::fs::read_to_string("/proc/kallsyms") {
        Ok(k) => k,
        Err(e) => {
            let why = format!("cannot read /proc/kallsyms: {e}");
            return blocked(String::new(), &why, why.clone(), t0, wanted);
        }
    };
    let symbols = Symbols::parse(&kallsyms);
    if !symbols.has_rdma() {
        return blocked(
            kallsyms,
            "no RDMA stack in this kernel (no ib_core in /proc/kallsyms)",
            "this kernel has no RDMA stack loaded (no ib_core in /proc/kallsyms): nothing to trace here; \
             load the RDMA modules (ib_core, ib_uverbs, a provider such as rdma_rxe or mlx5_ib), \
             or try the soft-RoCE lab: cargo xtask demo"
                .into(),
            t0,
            wanted,
        );
    }
    let mut btf = match BtfSource::system() {
        Ok(b) => b,
        Err(e) => {
            let why = format!("{e}; rdma-trace needs kernel BTF (CONFIG_DEBUG_INFO_BTF)");
            return blocked(kallsyms, "no kernel BTF", why, t0, wanted);
        }
    };
    let tp = |cat: &str, name: &str| kernel::tracepoint_format(cat, name).ok();
    let libraries = user_libraries();
    let plan = select::plan(
        &mut KernelView { symbols: &symbols, btf: &mut btf, tracepoint: &tp, libraries: &libraries },
        wanted,
    );
    let mlx5 = Some(mlx5::check(btf.module("mlx5_ib")));
    Planning { kallsyms, plan, blocked: None, mlx5, took: t0.elapsed() }
}

/// No plan can be made: every catalog probe is skipped with `short`, and `why` says it all.
fn blocked(kallsyms: String, short: &str, why: String, t0: Instant, wanted: &[&str]) -> Planning {
    let skipped = CATALOG
        .iter()
        .filter(|s| wanted.is_empty() || wanted.contains(&s.id.as_str()))
        .map(|spec| Skipped { spec, reason: crate::plan::select::Skip::Blocked(short.to_string()) })
        .collect();
    Planning {
        kallsyms,
        plan: Plan { probes: Vec::new(), skipped, counted: false },
        blocked: Some(why),
        mlx5: None,
        took: t0.elapsed(),
    }
}

/// The user-space libraries the catalog probes, each parsed once.
pub(crate) fn user_libraries() -> HashMap<String, Result<Library, LibraryError>> {
    let mut out = HashMap::new();
    for spec in CATALOG {
        if let Kind::Uprobe { library } = spec.kind {
            out.entry(library.to_string()).or_insert_with(|| {
                let path =
                    crate::plan::elfsym::find_library(library).ok_or(LibraryError::NotFound(library))?;
                let data = std::fs::read(&path)
                    .map_err(|source| LibraryError::Read { path: path.clone(), source })?;
                let functions = crate::plan::elfsym::default_symbols(&data)
                    .map_err(|source| LibraryError::Elf { path: path.clone(), source })?;
                Ok(Library { path, functions })
            });
        }
    }
    out
}
