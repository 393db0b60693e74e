//! Units as rdma-trace writes them for people: sizes in B/KiB/MiB/GiB, one rule for every
//! view that spells a size out in words (the TUI's columns use their own compact form).

/// The page size of the architecture the programs are built for (x86-64): what a pin
/// charges per page and what `vm_pgoff` counts in.
pub const PAGE: u64 = 4096;

/// A size, exact: in the largest of GiB/MiB/KiB it is a whole number of, else in bytes;
/// `u64::MAX` (RLIM_INFINITY) is "unlimited".
pub fn bytes(b: u64) -> String {
    const UNITS: [(u32, &str); 3] = [(30, "GiB"), (20, "MiB"), (10, "KiB")];
    if b == u64::MAX {
        return "unlimited".into();
    }
    match UNITS.iter().find(|(shift, _)| b >= 1 << shift && b.is_multiple_of(1 << shift)) {
        Some((shift, unit)) => format!("{} {unit}", b >> shift),
        None => format!("{b} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(bytes(0), "0 bytes");
        assert_eq!(bytes(1023), "1023 bytes");
        assert_eq!(bytes(4096), "4 KiB");
        assert_eq!(bytes(4480), "4480 bytes");
        assert_eq!(bytes(64 << 20), "64 MiB");
        assert_eq!(bytes(3 << 29), "1536 MiB");
        assert_eq!(bytes(2 << 30), "2 GiB");
        assert_eq!(bytes(u64::MAX), "unlimited");
    }
}
