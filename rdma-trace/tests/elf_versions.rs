//! uprobes go on the default symbol version: checked on this host's libibverbs (installed
//! by `cargo xtask setup`) against binutils' own reading of the version tables.

use std::collections::HashMap;
use std::process::Command;

/// `name` → (default-version address, compat-version addresses) as readelf prints them.
fn readelf_versions(path: &str) -> HashMap<String, (Option<u64>, Vec<u64>)> {
    let out = Command::new("readelf").args(["--dyn-syms", "-W", path]).output().expect("readelf (binutils)");
    let mut m: HashMap<String, (Option<u64>, Vec<u64>)> = HashMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 || f[3] != "FUNC" || f[6] == "UND" {
            continue;
        }
        let addr = u64::from_str_radix(f[1], 16).unwrap();
        if let Some((name, _)) = f[7].split_once("@@") {
            m.entry(name.into()).or_default().0 = Some(addr);
        } else if let Some((name, _)) = f[7].split_once('@') {
            m.entry(name.into()).or_default().1.push(addr);
        }
    }
    m
}

#[test]
fn libibverbs_default_versions_not_compat_aliases() {
    let path = rdma_trace::plan::elfsym::find_library("libibverbs.so.1")
        .expect("libibverbs.so.1 (Debian libibverbs1, installed by cargo xtask setup)");
    let ours = rdma_trace::plan::elfsym::default_symbols(&std::fs::read(&path).unwrap()).unwrap();
    let theirs = readelf_versions(path.to_str().unwrap());
    let mut checked = 0;
    for name in ["ibv_reg_mr", "ibv_create_cq", "ibv_get_cq_event", "ibv_dereg_mr", "ibv_create_qp"] {
        let (default, compat) = theirs.get(name).unwrap_or_else(|| panic!("readelf shows no {name}"));
        assert!(!compat.is_empty(), "{name} has a compat alias in this libibverbs");
        let d = default.unwrap_or_else(|| panic!("{name} has no default version"));
        // For libibverbs the text section's file offset equals its address (readelf -S).
        assert_eq!(ours.get(name), Some(&d), "{name}: default version at {d:#x}, compat at {compat:x?}");
        checked += 1;
    }
    assert_eq!(checked, 5);
}
