//! Turning raw field values into RDMA meaning: access flags, vm_flags, page cache mode,
//! errno names. Constants come from the kernel's own headers (named at each table).

use crate::event::Value;
pub use crate::plan::arch::cache_mode;
use crate::plan::catalog::Render;
pub use rdma_trace_format::event::{err_ptr, errno_name};

/// `enum ib_access_flags` (include/rdma/ib_verbs.h).
const ACCESS: &[(u64, &str)] = &[
    (1, "LOCAL_WRITE"),
    (2, "REMOTE_WRITE"),
    (4, "REMOTE_READ"),
    (8, "REMOTE_ATOMIC"),
    (16, "MW_BIND"),
    (32, "ZERO_BASED"),
    (64, "ON_DEMAND"),
    (128, "HUGETLB"),
    (256, "FLUSH_GLOBAL"),
    (512, "FLUSH_PERSISTENT"),
    (1 << 20, "RELAXED_ORDERING"),
];

/// `VM_*` (include/linux/mm.h), the ones that matter for RDMA mappings.
const VM_FLAGS: &[(u64, &str)] = &[
    (0x1, "READ"),
    (0x2, "WRITE"),
    (0x4, "EXEC"),
    (0x8, "SHARED"),
    (0x10, "MAYREAD"),
    (0x20, "MAYWRITE"),
    (0x40, "MAYEXEC"),
    (0x80, "MAYSHARE"),
    (0x400, "PFNMAP"),
    (0x2000, "LOCKED"),
    (0x4000, "IO"),
    (0x20000, "DONTCOPY"),
    (0x40000, "DONTEXPAND"),
    (0x4000000, "DONTDUMP"),
    (0x10000000, "MIXEDMAP"),
];

/// Flags written as `A_B|C_D` (access flags) as their words' initials, `AB|CD`, for a
/// narrow table: LOCAL_WRITE|REMOTE_READ is `LW|RR`. A hex remainder stays as it is.
pub(crate) fn initials(flags: &str) -> String {
    let short = |f: &str| {
        if f.starts_with("0x") {
            f.to_string()
        } else {
            f.split('_').filter_map(|w| w.chars().next()).collect()
        }
    };
    flags.split('|').map(short).collect::<Vec<String>>().join("|")
}

fn bits(v: u64, table: &[(u64, &str)]) -> String {
    let mut names: Vec<String> =
        table.iter().filter(|(b, _)| v & b != 0).map(|(_, n)| n.to_string()).collect();
    let known: u64 = table.iter().map(|(b, _)| b).fold(0, |a, b| a | b);
    if v & !known != 0 {
        names.push(format!("{:#x}", v & !known));
    }
    if names.is_empty() { "0".into() } else { names.join("|") }
}

/// The value as stored in the event: signed for return codes, unsigned otherwise.
pub(crate) fn store(render: Render, raw: u64, size: u8) -> Value {
    match render {
        Render::Errno => {
            // int return values arrive in a 64-bit register: sign-extend from 32 bits.
            let v = if size <= 4 { raw as u32 as i32 as i64 } else { raw as i64 };
            Value::I(v)
        }
        _ => Value::U(raw),
    }
}

/// How field `name` of `ev` is shown: the hint its probe's catalog entry gives (or the
/// syscall table's), so every output renders a value alike.
pub fn of(ev: &crate::event::Event, name: &str) -> Render {
    if let Some(spec) = ev.probe().map(crate::plan::catalog::by_id) {
        let fields = if ev.kind == crate::event::EventKind::Return { spec.ret } else { spec.entry };
        if let Some(f) = fields.iter().find(|f| f.name() == name) {
            return f.render;
        }
    }
    // A newer writer's field, which no table here names, reads as a number.
    crate::event::FieldId::parse(name).map_or(Render::Dec, crate::plan::syscalls::render_of)
}

/// Field `name` of `ev`, with value `v`, as every output shows it.
pub(crate) fn field(ev: &crate::event::Event, name: &str, v: Value) -> String {
    text(of(ev, name), v)
}

/// `field`, written at the end of `out`.
pub(crate) fn write_field(
    out: &mut String,
    ev: &crate::event::Event,
    name: &str,
    v: Value,
) -> std::fmt::Result {
    write_text(out, of(ev, name), v)
}

/// Human text for a value.
pub fn text(render: Render, v: Value) -> String {
    let mut s = String::new();
    write_text(&mut s, render, v).expect("a String takes every write");
    s
}

/// `text`, written at the end of `out` (no string of its own for a plain number).
fn write_text(out: &mut String, render: Render, v: Value) -> std::fmt::Result {
    use std::fmt::Write as _;
    let u = v.as_u64();
    match render {
        Render::Hex => write!(out, "{u:#x}"),
        Render::Dec if u == u64::MAX => write!(out, "unlimited"),
        Render::Dec => write!(out, "{u}"),
        Render::Errno => {
            let s = u as i64;
            if s < 0 { write!(out, "{s} ({})", errno_name(-s)) } else { write!(out, "{s}") }
        }
        Render::PtrOrErr => match err_ptr(u) {
            Some(e) => write!(out, "ERR_PTR({e} {})", errno_name(-e)),
            None => write!(out, "{u:#x}"),
        },
        Render::Access => write!(out, "{}", bits(u, ACCESS)),
        Render::VmFlags => write!(out, "{}", bits(u, VM_FLAGS)),
        Render::PgProt => write!(out, "{u:#x} {}", cache_mode(u)),
        Render::Mlx5Pgoff => write!(out, "{}", crate::plan::mlx5::pgoff(u)),
        Render::Fd => write!(out, "{}", u as u32 as i32),
        Render::QpState => match qp_state(u) {
            Some(name) => write!(out, "{name}"),
            None => write!(out, "{u}"),
        },
        Render::GidHalf => {
            let b = u.to_le_bytes();
            write!(
                out,
                "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
                b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
            )
        }
    }
}

/// `enum ib_qp_state` by value.
pub(crate) fn qp_state(v: u64) -> Option<&'static str> {
    ["RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"].get(usize::try_from(v).ok()?).copied()
}

/// A string from outside (a process name, a path) made safe for a terminal: control
/// characters (ESC, newline, …) are written as escapes, so they can neither move the
/// cursor nor fake a line of output.
pub(crate) fn printable(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_descriptor_is_a_c_int() {
        // An anonymous mmap passes fd -1; the raw record holds its 32 bits zero-extended.
        assert_eq!(text(Render::Fd, Value::U(0xffff_ffff)), "-1");
        assert_eq!(text(Render::Fd, Value::U(4)), "4");
        assert_eq!(text(Render::QpState, Value::U(2)), "RTR");
        assert_eq!(text(Render::QpState, Value::U(9)), "9");
        // The interface id of ::ffff:10.0.0.2 as it lies in memory, read as a u64.
        assert_eq!(text(Render::GidHalf, Value::U(0x0200_000a_ffff_0000)), "0000:ffff:0a00:0002");
        assert_eq!(crate::plan::syscalls::render_of(crate::event::FieldId::Fd), Render::Fd);
    }

    #[test]
    fn pgprot_cache_modes_from_kernel_constants() {
        use crate::plan::arch::{PAGE_PCD, PAGE_PWT};
        // pgprot_writecombine sets the PAT index 1 bits (PWT); pgprot_noncached UC- (PCD).
        let base = 0x8000_0000_0000_0027u64; // NX|ACCESSED|USER|RW|PRESENT
        assert_eq!(cache_mode(base), "WB (cached)");
        assert_eq!(cache_mode(base | PAGE_PWT), "WC (write-combining)");
        assert_eq!(cache_mode(base | PAGE_PCD), "UC- (uncached)");
        assert_eq!(cache_mode(base | PAGE_PCD | PAGE_PWT), "UC (uncached)");
    }

    #[test]
    fn access_and_vm_flags() {
        assert_eq!(text(Render::Access, Value::U(7)), "LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ");
        assert_eq!(text(Render::Access, Value::U(0)), "0");
        assert_eq!(initials(&text(Render::Access, Value::U(7))), "LW|RW|RR");
        assert_eq!(initials(&text(Render::Access, Value::U((1 << 20) | 8 | (1 << 30)))), "RA|RO|0x40000000");
        // VM_IO|VM_PFNMAP|VM_DONTEXPAND|VM_DONTDUMP: what io_remap_pfn_range sets for a doorbell page.
        assert_eq!(
            text(Render::VmFlags, Value::U(0x4044400 | 0xb)),
            "READ|WRITE|SHARED|PFNMAP|IO|DONTEXPAND|DONTDUMP"
        );
    }

    #[test]
    fn outside_strings_cannot_drive_the_terminal() {
        assert_eq!(printable("ib_send_bw"), "ib_send_bw");
        assert_eq!(printable("a\x1b[2Jb\nfake line"), "a\\x1b[2Jb\\nfake line");
        assert_eq!(printable("\u{9b}31m"), "\\x9b31m");
    }

    #[test]
    fn errors() {
        assert_eq!(store(Render::Errno, 0xffff_fff4, 4), Value::I(-12));
        assert_eq!(text(Render::Errno, Value::I(-12)), "-12 (ENOMEM)");
        assert_eq!(text(Render::PtrOrErr, Value::U((-12i64) as u64)), "ERR_PTR(-12 ENOMEM)");
        assert_eq!(text(Render::PtrOrErr, Value::U(0xffff_8880_0000_1000)), "0xffff888000001000");
    }
}
