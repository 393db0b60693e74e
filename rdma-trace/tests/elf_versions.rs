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

/// The libibverbs functions the catalog puts uprobes on.
fn catalog_functions() -> Vec<&'static str> {
    use rdma_trace::plan::catalog::{CATALOG, Kind};
    CATALOG
        .iter()
        .filter(|p| matches!(p.kind, Kind::Uprobe { .. }))
        .flat_map(|p| p.symbols.iter().map(|s| s.name))
        .collect()
}

#[test]
fn libibverbs_default_versions_not_compat_aliases() {
    let path = rdma_trace::plan::elfsym::find_library("libibverbs.so.1")
        .expect("libibverbs.so.1 (Debian libibverbs1, installed by cargo xtask setup)");
    let ours = rdma_trace::plan::elfsym::default_symbols(&std::fs::read(&path).unwrap()).unwrap();
    let theirs = readelf_versions(path.to_str().unwrap());
    // Every function readelf gives a default version, we place at that version's address
    // (for libibverbs the text section's file offset equals its address: readelf -S).
    let wrong: Vec<String> = theirs
        .iter()
        .filter_map(|(name, (default, compat))| {
            let d = (*default)?;
            (ours.get(name) != Some(&d))
                .then(|| format!("{name}: ours {:x?}, default {d:#x}, compat {compat:x?}", ours.get(name)))
        })
        .collect();
    assert!(wrong.is_empty(), "{} functions differ from readelf:\n{}", wrong.len(), wrong.join("\n"));
    let defaults = theirs.values().filter(|(d, _)| d.is_some()).count();
    assert!(defaults > 100, "readelf lists only {defaults} default-versioned functions");
    // The catalog's functions are all there, and the reason for the care is real: some of
    // them have a compat alias at another address.
    let mut aliased = Vec::new();
    for name in catalog_functions() {
        let (default, compat) = theirs.get(name).unwrap_or_else(|| panic!("readelf shows no {name}"));
        assert!(default.is_some(), "{name} has no default version");
        if !compat.is_empty() {
            aliased.push(name);
        }
    }
    assert!(aliased.contains(&"ibv_reg_mr") && aliased.contains(&"ibv_create_cq"), "aliased: {aliased:?}");
}
