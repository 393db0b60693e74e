//! Facts about the running kernel: which functions exist and in which module
//! (/proc/kallsyms), tracefs, and tracepoint record layouts (tracefs `format` files).

use std::collections::HashMap;
use std::path::Path;

/// Text symbols of the kernel and its loaded modules: name → module (`vmlinux` for
/// built-in code). The first definition of a name wins.
#[derive(Debug, Default, Clone)]
pub struct Symbols {
    map: HashMap<String, (String, u64)>,
}

/// The text (function) symbols of a /proc/kallsyms dump: (address, name, module), the
/// module `None` for built-in code. The one reader of that format.
pub(crate) fn kallsyms_text(kallsyms: &str) -> impl Iterator<Item = (u64, &str, Option<&str>)> {
    kallsyms.lines().filter_map(|line| {
        let mut it = line.split_ascii_whitespace();
        let (addr, ty, name) = (it.next()?, it.next()?, it.next()?);
        if !matches!(ty, "t" | "T" | "w" | "W") {
            return None;
        }
        let module = it.next().map(|m| m.trim_start_matches('[').trim_end_matches(']'));
        Some((u64::from_str_radix(addr, 16).unwrap_or(0), name, module))
    })
}

impl Symbols {
    /// The symbols of a /proc/kallsyms text, by name, with their modules.
    pub fn parse(kallsyms: &str) -> Self {
        let mut map = HashMap::new();
        for (addr, name, module) in kallsyms_text(kallsyms) {
            map.entry(name.to_string()).or_insert_with(|| (module.unwrap_or("vmlinux").to_string(), addr));
        }
        Self { map }
    }

    pub(crate) fn module_of(&self, name: &str) -> Option<&str> {
        self.map.get(name).map(|(m, _)| m.as_str())
    }

    /// The function's address (0 when kallsyms hides addresses from non-root).
    pub(crate) fn address_of(&self, name: &str) -> Option<u64> {
        self.map.get(name).map(|(_, a)| *a)
    }

    /// Any RDMA core code at all (built-in or loaded as a module)?
    pub(crate) fn has_rdma(&self) -> bool {
        self.map.contains_key("ib_register_device")
    }
}

pub(crate) const TRACEFS: &str = "/sys/kernel/tracing";

/// Makes sure tracefs is mounted (tracepoints need it); returns what it did.
/// Major and minor of a kernel release string ("6.12.48+deb13-amd64" → (6, 12)).
pub fn parse_release(release: &str) -> Option<(u32, u32)> {
    let mut it = release.trim().split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// Whether the running kernel is at least `major.minor` (false if it cannot be read).
pub(crate) fn release_at_least(major: u32, minor: u32) -> bool {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .and_then(|r| parse_release(&r))
        .is_some_and(|v| v >= (major, minor))
}

/// Mounts tracefs where it is not. Two tracers that start together on a machine where it
/// is not mounted both try; the one that loses the race finds it mounted by the other.
pub fn ensure_tracefs() -> std::io::Result<&'static str> {
    let present = || Path::new(TRACEFS).join("events").exists();
    if present() {
        return Ok("tracefs present");
    }
    let out = std::process::Command::new("mount").args(["-t", "tracefs", "nodev", TRACEFS]).output()?;
    if out.status.success() {
        Ok("mounted tracefs")
    } else if present() {
        Ok("tracefs present (mounted by another process meanwhile)")
    } else {
        let why = String::from_utf8_lossy(&out.stderr);
        let why = why.lines().next().unwrap_or("").trim();
        Err(std::io::Error::other(format!("mount -t tracefs nodev {TRACEFS} failed: {why}")))
    }
}

/// A field of a tracepoint record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TpField {
    pub name: String,
    pub offset: u32,
    pub size: u32,
}

/// Parses a tracefs `format` file into its fields (`field:TYPE NAME[N]; offset:O; size:S;`).
pub(crate) fn parse_format(text: &str) -> Vec<TpField> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut name = None;
        let mut offset = None;
        let mut size = None;
        for part in line.split(';') {
            let part = part.trim();
            if let Some(decl) = part.strip_prefix("field:") {
                let last = decl.split_ascii_whitespace().last().unwrap_or("");
                let last = last.split('[').next().unwrap_or("");
                name = Some(last.trim_start_matches('*').to_string());
            } else if let Some(v) = part.strip_prefix("offset:") {
                offset = v.parse().ok();
            } else if let Some(v) = part.strip_prefix("size:") {
                size = v.parse().ok();
            }
        }
        if let (Some(name), Some(offset), Some(size)) = (name, offset, size) {
            out.push(TpField { name, offset, size });
        }
    }
    out
}

pub(crate) fn tracepoint_format(category: &str, name: &str) -> std::io::Result<Vec<TpField>> {
    let p = Path::new(TRACEFS).join("events").join(category).join(name).join("format");
    Ok(parse_format(&std::fs::read_to_string(p)?))
}

pub(crate) fn field<'a>(fields: &'a [TpField], name: &str) -> Option<&'a TpField> {
    fields.iter().find(|f| f.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_versions() {
        assert_eq!(parse_release("6.12.48+deb13-amd64\n"), Some((6, 12)));
        assert_eq!(parse_release("7.3.4"), Some((7, 3)));
        assert_eq!(parse_release("garbage"), None);
        assert!(parse_release("6.7.0").unwrap() >= (6, 7) && parse_release("6.6.9").unwrap() < (6, 7));
    }

    #[test]
    fn kallsyms_modules_and_types() {
        let s = Symbols::parse(
            "ffffffffc0a01000 t ib_uverbs_mmap\t[ib_uverbs]\n\
             ffffffff81000000 T _stext\n\
             ffffffffc0b00000 d some_data\t[ib_core]\n\
             ffffffffc0c00000 t __ib_umem_get_va\t[ib_core]\n",
        );
        assert_eq!(s.module_of("ib_uverbs_mmap"), Some("ib_uverbs"));
        assert_eq!(s.module_of("_stext"), Some("vmlinux"));
        assert_eq!(s.module_of("some_data"), None);
        assert_eq!(s.module_of("__ib_umem_get_va"), Some("ib_core"));
        assert!(!s.has_rdma());
    }

    #[test]
    fn format_of_raw_syscalls_sys_enter() {
        // As printed by tracefs on Linux 6.x.
        let text = "name: sys_enter\nID: 21\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
\n\tfield:long id;\toffset:8;\tsize:8;\tsigned:1;\n\
\tfield:unsigned long args[6];\toffset:16;\tsize:48;\tsigned:0;\n\nprint fmt: \"NR %ld\"\n";
        let f = parse_format(text);
        assert_eq!(field(&f, "id"), Some(&TpField { name: "id".into(), offset: 8, size: 8 }));
        assert_eq!(field(&f, "args"), Some(&TpField { name: "args".into(), offset: 16, size: 48 }));
        assert_eq!(field(&f, "common_pid").map(|f| f.offset), Some(4));
    }
}
