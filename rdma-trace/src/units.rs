//! The small kernels every view shares: the one quantile (nearest rank), and durations and
//! sizes as rdma-trace writes them: in words (reports, explanations) or compact (the TUI's
//! columns). Every view formats through here.

pub use rdma_trace_format::PAGE;

/// A size, exact: in the largest of GiB/MiB/KiB it is a whole number of, else in bytes;
/// `u64::MAX` (RLIM_INFINITY) is "unlimited".
pub(crate) fn bytes(b: u64) -> String {
    const UNITS: [(u32, &str); 3] = [(30, "GiB"), (20, "MiB"), (10, "KiB")];
    if b == u64::MAX {
        return "unlimited".into();
    }
    match UNITS.iter().find(|(shift, _)| b >= 1 << shift && b.is_multiple_of(1 << shift)) {
        Some((shift, unit)) => format!("{} {unit}", b >> shift),
        None => format!("{b} bytes"),
    }
}

/// A size to one decimal in the largest unit it reaches: `1.5 MiB`, `12 B` (the report's tables).
pub(crate) fn bytes_approx(b: u64) -> String {
    match b {
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

/// A size in a narrow column: `1.5G`, `1.5M`, `4K`, `12B`.
pub fn bytes_compact(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{:.1}G", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1}M", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{}K", b >> 10),
        b => format!("{b}B"),
    }
}

/// A duration in words: `4.5 µs`, `1.23 ms`.
pub fn duration(ns: u64) -> String {
    if ns >= 1_000_000 { format!("{:.2} ms", ns as f64 / 1e6) } else { format!("{:.1} µs", ns as f64 / 1e3) }
}

/// A duration in a narrow column: `45µs`, `1.2ms`.
pub(crate) fn duration_compact(ns: u64) -> String {
    if ns >= 1_000_000 { format!("{:.1}ms", ns as f64 / 1e6) } else { format!("{:.0}µs", ns as f64 / 1e3) }
}

/// Milliseconds to the microsecond: `0.123 ms` (step timings).
pub(crate) fn millis(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

/// The q-quantile (0..=1) of `sorted` (ascending), nearest rank: the smallest value with
/// at least q of them at or below it. `None` when there is none.
pub(crate) fn quantile(sorted: &[u64], q: f64) -> Option<u64> {
    let rank = ((sorted.len() as f64) * q.clamp(0.0, 1.0)).ceil().max(1.0) as usize;
    sorted.get(rank.min(sorted.len()).checked_sub(1)?).copied()
}

/// `n` and the noun, plural unless one: "1 page", "3 pages", "1 completion event".
pub(crate) fn count(n: u64, one: &str) -> String {
    if n == 1 { format!("1 {one}") } else { format!("{n} {one}s") }
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
    fn durations_and_approximate_sizes() {
        assert_eq!((duration(4_500), duration(1_234_567)), ("4.5 µs".into(), "1.23 ms".into()));
        assert_eq!((duration_compact(45_400), duration_compact(1_250_000)), ("45µs".into(), "1.2ms".into()));
        assert_eq!(millis(123_456), "0.123 ms");
        assert_eq!((bytes_approx(1536), bytes_approx(12)), ("1.5 KiB".into(), "12 B".into()));
        assert_eq!(
            (bytes_compact(3 << 29), bytes_compact(4096), bytes_compact(12)),
            ("1.5G".into(), "4K".into(), "12B".into())
        );
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
