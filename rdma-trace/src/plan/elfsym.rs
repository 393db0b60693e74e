//! Finding a shared library's exported functions by their *default* symbol version.
//!
//! libibverbs exports most verbs twice: `ibv_reg_mr@IBVERBS_1.0` (a compat alias kept for
//! binaries linked in 2006) and `ibv_reg_mr@@IBVERBS_1.1` (what programs call today). Both
//! are named `ibv_reg_mr` in `.dynsym`; a uprobe on the first match may sit on the alias
//! and never fire. The default version is the one whose `.gnu.version` entry is not hidden.

use object::read::elf::ElfFile64;
use object::{Object, ObjectSection, ObjectSymbol};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Defined function symbols → file offset (what a uprobe attaches to), default version
/// preferred over hidden (compat) ones.
pub fn default_symbols(data: &[u8]) -> Result<HashMap<String, u64>, object::Error> {
    let elf = ElfFile64::<object::Endianness>::parse(data)?;
    let endian = elf.endian();
    let versions = elf.elf_section_table().versions(endian, data)?;
    let mut out: HashMap<String, (u64, bool)> = HashMap::new();
    for sym in elf.dynamic_symbols() {
        if !sym.is_definition() || sym.kind() != object::SymbolKind::Text {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        let hidden = versions.as_ref().is_some_and(|v| v.version_index(endian, sym.index()).is_hidden());
        let Some(section) = sym.section_index().and_then(|i| elf.section_by_index(i).ok()) else {
            continue;
        };
        let Some((file_off, _)) = section.file_range() else {
            continue;
        };
        let off = sym.address() - section.address() + file_off;
        let e = out.entry(name.to_string()).or_insert((off, hidden));
        if e.1 && !hidden {
            *e = (off, hidden);
        }
    }
    Ok(out.into_iter().map(|(k, (off, _))| (k, off)).collect())
}

/// Where the dynamic linker would find `soname` (the usual multiarch directories).
pub fn find_library(soname: &str) -> Option<PathBuf> {
    crate::plan::arch::HOST
        .lib_dirs
        .iter()
        .map(|d| Path::new(d).join(soname))
        .find(|p| p.exists())
        .and_then(|p| p.canonicalize().ok())
}
