//! Any bytes given to the capture reader — plain or zstd, lenient or strict — end in
//! records, damage named by line and byte offset, or a refusal; never a panic, never
//! unbounded memory (libFuzzer's -rss_limit_mb holds the run to that). A line the quick
//! event reader reads is read the same by serde.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdma_trace_format::reader::{Damage, ReadError, Reader, decoded};

/// A damaged line is named where it is: line 1 or later, starting inside the input (for a
/// plain input, whose offsets are the input's own).
fn check(d: &Damage, plain_len: Option<usize>) {
    assert!(d.line >= 1, "{d}");
    if let Some(len) = plain_len {
        assert!((d.offset as usize) < len, "{d} beyond {len} bytes");
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        for line in text.lines() {
            if let Some(quick) = rdma_trace_format::quick::event(line) {
                let serde: rdma_trace_format::event::Event =
                    serde_json::from_str(line).expect("a line read quick is an event to serde too");
                assert_eq!(quick, serde, "{line}");
            }
        }
    }
    let plain_len = (!data.starts_with(&[0x28, 0xb5, 0x2f, 0xfd])).then_some(data.len());
    for strict in [false, true] {
        let Ok(input) = decoded(Box::new(data)) else { return };
        let mut r = Reader::new(input, strict);
        for rec in r.by_ref() {
            if let Err(ReadError::Damaged(d)) = rec {
                assert!(strict, "only a strict reader stops on damage");
                check(&d, plain_len);
            }
        }
        assert!(r.report.described.len() as u64 <= r.report.damaged);
        for d in &r.report.described {
            check(d, plain_len);
        }
    }
});
