//! The probe plan of the two lab kernels, from their real BTF (Debian 6.12 and 7.3, copied
//! from /sys/kernel/btf in the guest; `fixtures/btf/`).

use rdma_trace::plan::btf::{self, BtfSource};
use rdma_trace::plan::catalog::{CATALOG, Kind};
use rdma_trace::plan::kernel::{Symbols, TpField};
use rdma_trace::plan::select::{self, KernelView, Library, Plan};
use std::path::{Path, PathBuf};

pub const K612: &str = "btf-6.12.118+deb13-amd64";
pub const K73: &str = "btf-7.3.4+deb13-amd64";

/// Unpacks a fixture once per test process into target/.
pub fn kernel_fixture(name: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = root.join("../target/fixtures");
    let dir = out.join(name);
    static UNPACK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = UNPACK.lock().unwrap_or_else(|e| e.into_inner());
    if !dir.join("vmlinux").exists() {
        std::fs::create_dir_all(&out).unwrap();
        let tarball = root.join(format!("tests/fixtures/btf/{name}.tar.zst"));
        let st = std::process::Command::new("tar")
            .args(["-I", "zstd", "-xf"])
            .arg(&tarball)
            .arg("-C")
            .arg(&out)
            .status()
            .expect("tar (zstd is installed by cargo xtask setup)");
        assert!(st.success(), "unpacking {}", tarball.display());
    }
    dir
}

/// kallsyms as the lab kernel has it: each catalog function in the module whose BTF
/// defines it.
pub fn symbols_from_btf(dir: &Path, src: &mut BtfSource) -> Symbols {
    let mut text = String::from("ffffffff81000000 T ib_register_device\t[ib_core]\n");
    let mut modules: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|m| m != "vmlinux")
        .collect();
    modules.sort();
    for spec in CATALOG {
        for s in spec.symbols {
            for m in &modules {
                if btf::proto(src.module(m).unwrap(), s.name).is_ok() {
                    text.push_str(&format!("ffffffffc0000000 t {}\t[{m}]\n", s.name));
                }
            }
        }
    }
    Symbols::parse(&text)
}

pub fn plan_for(name: &str) -> Plan {
    plan_with(name, btf::Backend::default())
}

/// The plan with vmlinux BTF read through `backend`.
pub fn plan_with(name: &str, backend: btf::Backend) -> Plan {
    plan_of(name, backend, &Default::default())
}

/// The plan with the libibverbs probes too, planned on a made-up library that exports every
/// function the catalog names (the probes' slots and fields are what matters here).
pub fn plan_with_verbs(name: &str) -> Plan {
    let mut functions = std::collections::HashMap::new();
    for spec in CATALOG.iter().filter(|s| matches!(s.kind, Kind::Uprobe { .. })) {
        for s in spec.symbols {
            let next = 0x1_0000 + 0x100 * functions.len() as u64;
            functions.entry(s.name.to_string()).or_insert(next);
        }
    }
    let mut libraries = std::collections::HashMap::new();
    for spec in CATALOG {
        if let Kind::Uprobe { library } = spec.kind {
            let lib = Library { path: format!("/usr/lib/{library}").into(), functions: functions.clone() };
            libraries.insert(library.to_string(), Ok(lib));
        }
    }
    plan_of(name, btf::Backend::default(), &libraries)
}

fn plan_of(
    name: &str,
    backend: btf::Backend,
    libraries: &std::collections::HashMap<String, Result<Library, rdma_trace::plan::select::LibraryError>>,
) -> Plan {
    let dir = kernel_fixture(name);
    let mut src = BtfSource::open_with(&dir, backend).unwrap();
    let symbols = symbols_from_btf(&dir, &mut src);
    // The mr_dereg record as tracefs prints it on both kernels.
    let tp =
        |_: &str, n: &str| (n == "mr_dereg").then(|| vec![TpField { name: "id".into(), offset: 8, size: 4 }]);
    select::plan(
        &mut KernelView {
            symbols: &symbols,
            btf: &mut src,
            tracepoint: &tp,
            // User-space probes are planned from libibverbs, not BTF.
            libraries,
        },
        &[],
    )
}
