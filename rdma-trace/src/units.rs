//! The small kernels every view shares: the one quantile (nearest rank), and sizes as
//! rdma-trace writes them out in words (the TUI's columns use their own compact form).

pub use rdma_trace_format::PAGE;

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

/// The q-quantile (0..=1) of `sorted` (ascending), nearest rank: the smallest value with
/// at least q of them at or below it. `None` when there is none.
pub fn quantile(sorted: &[u64], q: f64) -> Option<u64> {
    let rank = ((sorted.len() as f64) * q.clamp(0.0, 1.0)).ceil().max(1.0) as usize;
    sorted.get(rank.min(sorted.len()).checked_sub(1)?).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(
            (quantile(&v, 0.5), quantile(&v, 0.99), quantile(&v, 1.0)),
            (Some(50), Some(99), Some(100))
        );
        assert_eq!(quantile(&v, 0.0), Some(1));
        assert_eq!(quantile(&[7, 9], 0.5), Some(7), "the median of two is the lower");
        assert_eq!(quantile(&[], 0.5), None);
    }

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
