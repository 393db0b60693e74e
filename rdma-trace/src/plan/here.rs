//! Planning on this machine: the catalog against the running kernel's symbols and BTF and
//! the installed libibverbs. Shared by `trace` and `probes`.

use crate::plan::btf::BtfSource;
use crate::plan::catalog::{CATALOG, Kind};
use crate::plan::kernel::{self, Symbols};
use crate::plan::select::{self, KernelView, Library, Plan};
use std::collections::HashMap;
use std::time::{Duration, Instant};

pub struct Planning {
    pub symbols: Symbols,
    /// /proc/kallsyms as read once for planning (the stack symbolizer reuses it).
    pub kallsyms: String,
    pub plan: Plan,
    /// Why no plan could be made at all (no RDMA stack, no BTF).
    pub blocked: Option<String>,
    pub took: Duration,
}

/// Resolves the plan for the running kernel (no privileges needed beyond reading
/// /proc/kallsyms and /sys/kernel/btf).
pub fn plan_here(wanted: &[&str]) -> Planning {
    let t0 = Instant::now();
    let kallsyms = match std::fs::read_to_string("/proc/kallsyms") {
        Ok(k) => k,
        Err(e) => {
            return Planning {
                symbols: Symbols::parse(""),
                kallsyms: String::new(),
                plan: Plan::default(),
                blocked: Some(format!("cannot read /proc/kallsyms: {e}")),
                took: t0.elapsed(),
            };
        }
    };
    let symbols = Symbols::parse(&kallsyms);
    if !symbols.has_rdma() {
        return Planning {
            symbols,
            kallsyms,
            plan: Plan::default(),
            blocked: Some(
                "this kernel has no RDMA stack loaded (no ib_core in /proc/kallsyms): nothing to trace here; \
                 load the RDMA modules (ib_core, ib_uverbs, a provider such as rdma_rxe or mlx5_ib), \
                 or try the soft-RoCE lab: cargo xtask demo"
                    .into(),
            ),
            took: t0.elapsed(),
        };
    }
    let mut btf = match BtfSource::system() {
        Ok(b) => b,
        Err(e) => {
            return Planning {
                symbols,
                kallsyms,
                plan: Plan::default(),
                blocked: Some(format!("{e}; rdma-trace needs kernel BTF (CONFIG_DEBUG_INFO_BTF)")),
                took: t0.elapsed(),
            };
        }
    };
    let tp = |cat: &str, name: &str| kernel::tracepoint_format(cat, name).ok();
    let libraries = user_libraries();
    let plan = select::plan(
        &mut KernelView { symbols: &symbols, btf: &mut btf, tracepoint: &tp, libraries: &libraries },
        wanted,
    );
    Planning { symbols, kallsyms, plan, blocked: None, took: t0.elapsed() }
}

/// The user-space libraries the catalog probes, each parsed once.
pub fn user_libraries() -> HashMap<String, Result<Library, String>> {
    let mut out = HashMap::new();
    for spec in CATALOG {
        if let Kind::Uprobe { library } = spec.kind {
            out.entry(library.to_string()).or_insert_with(|| {
                let path = crate::plan::elfsym::find_library(library).ok_or_else(|| {
                    format!("{library} not found (rdma-core's libibverbs is not installed)")
                })?;
                let data = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                let functions = crate::plan::elfsym::default_symbols(&data)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                Ok(Library { path, functions })
            });
        }
    }
    out
}
