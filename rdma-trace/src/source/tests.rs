//! The reader on a synthetic ring laid out as the kernel lays it out: positions, 8-byte
//! record headers (length with busy/discard bits), data mapped twice in a row.

use super::*;

const SIZE: usize = 256;

/// A ring the test produces into, as `bpf_ringbuf_reserve/submit/discard` would.
struct Fake {
    cons: Box<AtomicU64>,
    prod: Box<AtomicU64>,
    /// `2 * SIZE` bytes, 8-aligned: the data area twice.
    data: Box<[u64]>,
}

impl Fake {
    fn new() -> Self {
        Self {
            cons: Box::new(AtomicU64::new(0)),
            prod: Box::new(AtomicU64::new(0)),
            data: vec![0u64; 2 * SIZE / 8].into(),
        }
    }

    fn view(&self) -> RingView {
        // SAFETY: the boxes outlive the view in every test (the view is dropped first).
        unsafe { RingView::new(&*self.cons, &*self.prod, self.data.as_ptr().cast(), SIZE) }
    }

    fn put(&mut self, pos: u64, bytes: &[u8]) {
        let d = self.data.as_mut_ptr().cast::<u8>();
        for (k, b) in bytes.iter().enumerate() {
            let p = (pos as usize + k) & (SIZE - 1);
            // SAFETY: p < SIZE, so p and p + SIZE are inside the 2 * SIZE bytes.
            unsafe {
                *d.add(p) = *b;
                *d.add(p + SIZE) = *b;
            }
        }
    }

    /// Reserves a record of `payload` bytes; returns its position. Fails like the kernel
    /// when the ring has no room.
    fn reserve(&mut self, payload: &[u8]) -> Option<u64> {
        let prod = self.prod.load(Ordering::Relaxed);
        let total = (payload.len() as u64 + HDR_SZ).next_multiple_of(8);
        if prod + total - self.cons.load(Ordering::Relaxed) > SIZE as u64 {
            return None;
        }
        self.put(prod, &(payload.len() as u32 | BUSY_BIT).to_le_bytes());
        self.put(prod + 4, &0u32.to_le_bytes());
        self.put(prod + HDR_SZ, payload);
        self.prod.store(prod + total, Ordering::Release);
        Some(prod)
    }

    fn commit(&mut self, pos: u64, len: usize, discard: bool) {
        let w = len as u32 | if discard { DISCARD_BIT } else { 0 };
        self.put(pos, &w.to_le_bytes());
    }

    fn output(&mut self, payload: &[u8]) -> u64 {
        let pos = self.reserve(payload).expect("room");
        self.commit(pos, payload.len(), false);
        pos
    }
}

fn read_all(v: &mut RingView, limit: usize) -> (Drained, Vec<Vec<u8>>) {
    let mut got = Vec::new();
    let d = v.drain(limit, |b| got.push(b.to_vec()));
    (d, got)
}

#[test]
fn committed_records_arrive_in_order() {
    let mut ring = Fake::new();
    ring.output(b"one");
    ring.output(b"second record");
    let mut v = ring.view();
    let (d, got) = read_all(&mut v, 100);
    assert_eq!(got, vec![b"one".to_vec(), b"second record".to_vec()]);
    assert_eq!(d, Drained { records: 2, more: false, busy: false });
    assert_eq!(ring.cons.load(Ordering::Relaxed), ring.prod.load(Ordering::Relaxed));
}

#[test]
fn a_record_being_written_is_waited_for_never_skipped() {
    let mut ring = Fake::new();
    ring.output(b"before");
    let held = ring.reserve(b"held").unwrap();
    ring.output(b"behind");
    let mut v = ring.view();
    let (d, got) = read_all(&mut v, 100);
    assert_eq!(got, vec![b"before".to_vec()]);
    assert!(d.busy);
    std::thread::sleep(Duration::from_millis(3));
    // Still busy: nothing more, however long it takes.
    let (d, got) = read_all(&mut v, 100);
    assert!(d.busy && got.is_empty());
    assert_eq!(v.leftover(), Leftover { uncommitted: 1, blocked: 1 });
    ring.commit(held, 4, false);
    let (d, got) = read_all(&mut v, 100);
    assert_eq!(got, vec![b"held".to_vec(), b"behind".to_vec()]);
    assert!(!d.busy);
    assert_eq!(v.waits.records, 1);
    assert!(v.waits.longest >= Duration::from_millis(3), "{:?}", v.waits.longest);
    assert_eq!(v.leftover(), Leftover::default());
}

#[test]
fn discarded_records_are_passed_over() {
    let mut ring = Fake::new();
    let d1 = ring.reserve(b"dropped").unwrap();
    ring.output(b"kept");
    ring.commit(d1, 7, true);
    let mut v = ring.view();
    let (d, got) = read_all(&mut v, 100);
    assert_eq!(got, vec![b"kept".to_vec()]);
    assert_eq!(d.records, 1);
}

#[test]
fn records_wrap_around_the_end_contiguously() {
    let mut ring = Fake::new();
    let mut v = ring.view();
    let mut seen = Vec::new();
    // 40-byte payloads (48 with header) do not divide 256: records straddle the end.
    for i in 0..20u8 {
        let payload = [i; 40];
        ring.output(&payload);
        v.drain(100, |b| seen.push(b.to_vec()));
    }
    assert_eq!(seen.len(), 20);
    for (i, r) in seen.iter().enumerate() {
        assert_eq!(r, &vec![i as u8; 40], "record {i}");
    }
    assert!(ring.prod.load(Ordering::Relaxed) > 3 * SIZE as u64, "wrapped several times");
}

#[test]
fn a_full_ring_refuses_and_frees_room_as_read() {
    let mut ring = Fake::new();
    let mut n = 0;
    while ring.reserve(&[7; 56]).map(|p| ring.commit(p, 56, false)).is_some() {
        n += 1;
    }
    assert_eq!(n, SIZE / 64);
    let mut v = ring.view();
    let (_, got) = read_all(&mut v, 1);
    assert_eq!(got.len(), 1);
    assert!(ring.reserve(&[8; 56]).is_some(), "one record read, one record of room");
}

#[test]
fn batches_stop_at_the_limit_and_say_so() {
    let mut ring = Fake::new();
    for i in 0..5u8 {
        ring.output(&[i]);
    }
    let mut v = ring.view();
    let (d, got) = read_all(&mut v, 2);
    assert_eq!((d.records, d.more, got.len()), (2, true, 2));
    let (d, got) = read_all(&mut v, 2);
    assert_eq!((d.records, d.more), (2, true));
    assert_eq!(got, vec![vec![2u8], vec![3u8]]);
    let (d, got) = read_all(&mut v, 2);
    assert_eq!((d.records, d.more, got), (1, false, vec![vec![4u8]]));
}

#[test]
fn late_records_at_shutdown_are_described() {
    let mut ring = Fake::new();
    ring.output(b"a");
    ring.reserve(b"never").unwrap();
    ring.output(b"b");
    ring.output(b"c");
    let mut v = ring.view();
    read_all(&mut v, 100);
    assert_eq!(v.leftover(), Leftover { uncommitted: 1, blocked: 2 });
}
