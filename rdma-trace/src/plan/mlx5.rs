//! What mlx5_ib's mmap offsets mean, and a check of those numbers against a kernel's own.
//!
//! libmlx5 asks the kernel for a page by the offset it passes to mmap(2). `mlx5_ib_mmap`
//! (drivers/infiniband/hw/mlx5/main.c) reads a command from `vm_pgoff`:
//! `(pgoff >> MLX5_IB_MMAP_CMD_SHIFT) & MLX5_IB_MMAP_CMD_MASK`, and for UAR pages an index
//! from the low byte, extended by bits 16..24. Commands from `MLX5_IB_MMAP_OFFSET_START` up
//! are keys of entries the driver allocated (`rdma_user_mmap_entry`: dynamic UARs, VAR
//! pages, device memory). The numbers are enumerators in `mlx5_ib.h`, so they are in the
//! module's BTF: [`differences`] holds this table against the BTF of a running kernel (the
//! plan does, where mlx5_ib is loaded) and of the lab kernels (`tests/btf_fixtures.rs`).

use btf_rs::{Btf, Type};
use std::collections::BTreeMap;

pub const CMD_SHIFT: u64 = 8;
pub const CMD_MASK: u64 = 0xff;
pub const OFFSET_START: u64 = 9;

/// One mmap command of `enum mlx5_ib_mmap_cmd`.
pub struct Command {
    pub value: u64,
    /// Its enumerator in `mlx5_ib.h`.
    pub name: &'static str,
    pub what: &'static str,
}

pub const COMMANDS: &[Command] = &[
    Command {
        value: 0,
        name: "MLX5_IB_MMAP_REGULAR_PAGE",
        what: "UAR doorbell page (REGULAR_PAGE, best-effort write-combining)",
    },
    Command {
        value: 1,
        name: "MLX5_IB_MMAP_GET_CONTIGUOUS_PAGES",
        what: "contiguous pages (GET_CONTIGUOUS_PAGES)",
    },
    Command { value: 2, name: "MLX5_IB_MMAP_WC_PAGE", what: "UAR/BlueFlame page, write-combining (WC_PAGE)" },
    Command { value: 3, name: "MLX5_IB_MMAP_NC_PAGE", what: "UAR page, non-cached (NC_PAGE)" },
    Command { value: 5, name: "MLX5_IB_MMAP_CORE_CLOCK", what: "HCA core clock (CORE_CLOCK)" },
    Command { value: 6, name: "MLX5_IB_MMAP_ALLOC_WC", what: "allocated write-combining UAR (ALLOC_WC)" },
    Command { value: 7, name: "MLX5_IB_MMAP_CLOCK_INFO", what: "clock info page (CLOCK_INFO)" },
    Command { value: 8, name: "MLX5_IB_MMAP_DEVICE_MEM", what: "device memory (DEVICE_MEM)" },
];

/// Every number this module takes from `mlx5_ib.h`, by its enumerator's name.
pub fn constants() -> Vec<(&'static str, u64)> {
    let mut all = vec![
        ("MLX5_IB_MMAP_CMD_SHIFT", CMD_SHIFT),
        ("MLX5_IB_MMAP_CMD_MASK", CMD_MASK),
        ("MLX5_IB_MMAP_OFFSET_START", OFFSET_START),
    ];
    all.extend(COMMANDS.iter().map(|c| (c.name, c.value)));
    all
}

/// The command a `vm_pgoff` carries.
fn command(pgoff: u64) -> u64 {
    (pgoff >> CMD_SHIFT) & CMD_MASK
}

/// What a `vm_pgoff` asks for in a few words, without the offset: the command's, or a
/// dynamic entry's.
pub fn what(pgoff: u64) -> &'static str {
    let cmd = command(pgoff);
    if cmd >= OFFSET_START {
        return "dynamic entry (UAR, VAR or device memory)";
    }
    COMMANDS.iter().find(|c| c.value == cmd).map_or("unknown command", |c| c.what)
}

/// Whether the page is the device's (a UAR, BlueFlame, VAR or device-memory page, which
/// the kernel maps write-combining or uncached), not memory or the clock.
pub fn device_page(pgoff: u64) -> bool {
    let cmd = command(pgoff);
    cmd >= OFFSET_START || [0, 2, 3, 6].contains(&cmd)
}

/// What a `vm_pgoff` given to `mlx5_ib_mmap` asks for, as the text outputs show it.
pub fn pgoff(pgoff: u64) -> String {
    let cmd = command(pgoff);
    let index = (pgoff & 0xff) | ((pgoff >> 16) & 0xff) << 8;
    if cmd >= OFFSET_START {
        return format!("{pgoff:#x} (mmap entry key: dynamic UAR / VAR / device memory)");
    }
    match COMMANDS.iter().find(|c| c.value == cmd) {
        Some(c) => format!("{pgoff:#x} ({}, index {index})", c.what),
        None => format!("{pgoff:#x} (unknown mlx5 mmap command {cmd})"),
    }
}

/// The section of docs/probes.md on mlx5: what has been seen on hardware, what is checked
/// without it, and the mmap commands as this table decodes them.
pub fn markdown() -> String {
    let mut s = String::from(
        "\n## mlx5 on hardware: what is seen and what is not\n\n\
         No machine this project is tested on holds a ConnectX NIC, so no mlx5 probe has been seen to \
         fire. What is checked without one:\n\n\
         - every mlx5 probe above attaches and passes the verifier in the soft-RoCE lab on both lab \
         kernels (`mlx5_ib` is loaded there without a device);\n\
         - every field they read resolves in both lab kernels' `mlx5_ib` BTF (`tests/btf_fixtures.rs`);\n\
         - the numbers below, with which `mlx5_ib_mmap` reads `vm_pgoff`, are enumerators of \
         `mlx5_ib.h`: each plan holds them against the running kernel's `mlx5_ib` BTF (`rdma-trace \
         probes` prints the result; `trace` says when they differ) and the tests against both lab \
         kernels'.\n\n\
         Not seen on hardware: the mlx5 registration, mmap and CQ events, the page protection a real \
         UAR or BlueFlame mapping gets (write-combining or uncached, never cached), and the completion \
         path's hops from the interrupt.\n\n",
    );
    s.push_str(&format!(
        "The command is `(vm_pgoff >> {CMD_SHIFT}) & {CMD_MASK:#x}`; for UAR pages the index is the low \
         byte, extended by bits 16..24. Commands from {OFFSET_START} up are keys of entries the driver \
         allocated (dynamic UARs, VAR pages, device memory).\n\n| command | enumerator | what |\n|---|---|---|\n"
    ));
    for c in COMMANDS {
        s.push_str(&format!("| {} | `{}` | {} |\n", c.value, c.name, c.what));
    }
    s
}

/// The enumerators whose names start with `prefix` among the types `btf` itself defines
/// (a module's split BTF: its own types, not vmlinux's), with their values.
pub fn enumerators(btf: &Btf, prefix: &str) -> Result<BTreeMap<String, u64>, btf_rs::Error> {
    let section = btf.split().unwrap_or_else(|| btf.base());
    let (first, last) = section.type_id_range();
    let mut found = BTreeMap::new();
    for id in first..=last {
        match section.resolve_type_by_id(id)? {
            Type::Enum(e) => {
                for m in &e.members {
                    let name = btf.resolve_name(m)?;
                    if name.starts_with(prefix) {
                        // An enumerator's value is an int: the bits as the kernel's C has them.
                        let v = if e.is_signed() { m.val() as i32 as i64 as u64 } else { u64::from(m.val()) };
                        found.insert(name, v);
                    }
                }
            }
            Type::Enum64(e) => {
                for m in &e.members {
                    let name = btf.resolve_name(m)?;
                    if name.starts_with(prefix) {
                        found.insert(name, m.val());
                    }
                }
            }
            _ => {}
        }
    }
    Ok(found)
}

/// Where `expected` and the enumerators of `btf` (mlx5_ib's) disagree, one sentence each;
/// empty if they agree on every number.
pub fn differences(expected: &[(&str, u64)], btf: &Btf) -> Result<Vec<String>, btf_rs::Error> {
    let have = enumerators(btf, "MLX5_IB_")?;
    Ok(expected
        .iter()
        .filter_map(|&(name, want)| match have.get(name) {
            Some(&v) if v == want => None,
            Some(&v) => Some(format!("{name} is {v} in this kernel, rdma-trace decodes it as {want}")),
            None => Some(format!("{name} is not in this kernel's mlx5_ib")),
        })
        .collect())
}

/// The plan's check of [`constants`] against the running kernel's mlx5_ib.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check {
    /// mlx5_ib is not loaded: nothing of it can be traced, nothing to check.
    NotLoaded,
    /// Every number agrees; how many were checked.
    Agrees(usize),
    /// The kernel's numbers differ: mlx5 mmap offsets may be named wrongly.
    Differs(Vec<String>),
    /// The module's BTF could not be read.
    Unreadable(String),
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Check::NotLoaded => write!(f, "mlx5 mmap offsets: mlx5_ib not loaded, not checked"),
            Check::Agrees(n) => {
                write!(
                    f,
                    "mlx5 mmap offsets: the {n} numbers rdma-trace decodes agree with this kernel's mlx5_ib"
                )
            }
            Check::Differs(d) => write!(
                f,
                "mlx5 mmap offsets: this kernel's mlx5_ib differs from what rdma-trace decodes \
                 (its mappings may be named wrongly): {}",
                d.join("; ")
            ),
            Check::Unreadable(why) => write!(f, "mlx5 mmap offsets: not checked: {why}"),
        }
    }
}

/// [`Check`] of mlx5_ib's BTF, as `BtfSource::module` gives it.
pub fn check(module: Result<&Btf, super::btf::BtfError>) -> Check {
    let btf = match module {
        Ok(b) => b,
        Err(super::btf::BtfError::NoModule(_)) => return Check::NotLoaded,
        Err(e) => return Check::Unreadable(e.to_string()),
    };
    let expected = constants();
    match differences(&expected, btf) {
        Ok(d) if d.is_empty() => Check::Agrees(expected.len()),
        Ok(d) => Check::Differs(d),
        Err(e) => Check::Unreadable(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_decode_as_libmlx5_builds_them() {
        // libmlx5 maps UAR page 1 write-combining: pgoff = (MLX5_IB_MMAP_WC_PAGE << 8) | 1.
        assert_eq!(pgoff((2 << 8) | 1), "0x201 (UAR/BlueFlame page, write-combining (WC_PAGE), index 1)");
        assert_eq!(pgoff(3 << 8), "0x300 (UAR page, non-cached (NC_PAGE), index 0)");
        assert_eq!(pgoff(5 << 8), "0x500 (HCA core clock (CORE_CLOCK), index 0)");
        // Index above 255 uses bits 16..24: UAR 0x105 as REGULAR_PAGE.
        assert_eq!(
            pgoff((1 << 16) | 5),
            "0x10005 (UAR doorbell page (REGULAR_PAGE, best-effort write-combining), index 261)"
        );
        assert!(pgoff(9 << 8).contains("mmap entry key"));
        assert!(pgoff(4 << 8).contains("unknown mlx5 mmap command 4"));
    }
}
