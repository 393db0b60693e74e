//! Event sources: the live ring buffer (the kernel's BPF ring, read through our own
//! mapping of it) or a capture file. Both feed the same decode → correlate → sink pipeline.
//!
//! The reader is ours rather than aya's: it reads in bounded batches (a run loop must be
//! able to stop at any event rate), reports how long it waited on records still being
//! written, and at shutdown tells exactly what was still in the ring. It never skips a
//! record that is still being written: that record will be committed, and the records
//! behind it only wait. (The eBPF side never holds a reservation while it works, so such
//! waits are as short as one copy.)

/// A capture file or stream, read by the format crate's reader.
pub mod capture {
    pub use rdma_trace_format::reader::*;
}

use aya::maps::{MapData, RingBuf};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
use std::time::{Duration, Instant};
use tokio::io::unix::AsyncFd;

const BUSY_BIT: u32 = 1 << 31;
const DISCARD_BIT: u32 = 1 << 30;
const HDR_SZ: u64 = 8;

/// How one drain ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Drained {
    /// Records handed over (discarded records are not counted).
    pub records: usize,
    /// The batch limit was reached: more records are committed and waiting.
    pub more: bool,
    /// Stopped at a record still being written.
    pub busy: bool,
}

/// Waits on records still being written when the reader reached them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Waits {
    /// Records the reader found still being written (and waited for).
    pub records: u64,
    /// The longest such wait, from first sight to commit.
    pub longest: Duration,
}

/// What was left in the ring when the reader gave up at shutdown.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Leftover {
    /// Records reserved but never committed by the deadline.
    pub uncommitted: u64,
    /// Committed records behind them that could not be read.
    pub blocked: u64,
}

/// The reader's view of a ring: the two positions and the data area, mapped twice in a
/// row (so a record that wraps is contiguous), as the kernel lays it out.
pub(crate) struct RingView {
    consumer: *const AtomicU64,
    producer: *const AtomicU64,
    data: *const u8,
    mask: u64,
    waiting: Option<(u64, Instant)>,
    pub waits: Waits,
}

// SAFETY: the pointers are only dereferenced through &mut self.
unsafe impl Send for RingView {}

impl RingView {
    /// # Safety
    /// `consumer` and `producer` point at the ring's 8-byte positions, `data` at
    /// `2 * (mask + 1)` readable bytes holding the data area twice; all stay valid and
    /// writable (consumer) for the view's life.
    pub(crate) unsafe fn new(
        consumer: *const AtomicU64,
        producer: *const AtomicU64,
        data: *const u8,
        size: usize,
    ) -> Self {
        assert!(size.is_power_of_two());
        Self { consumer, producer, data, mask: size as u64 - 1, waiting: None, waits: Waits::default() }
    }

    fn consumer_pos(&self) -> &AtomicU64 {
        // SAFETY: see `new`.
        unsafe { &*self.consumer }
    }

    fn producer_pos(&self) -> u64 {
        // SAFETY: see `new`.
        unsafe { &*self.producer }.load(Ordering::Acquire)
    }

    fn data(&self, off: u64, len: usize) -> &[u8] {
        // SAFETY: the data area is mapped twice in a row, so `off & mask` plus a record's
        // length (at most the ring's size) stays inside it.
        unsafe { std::slice::from_raw_parts(self.data.add((off & self.mask) as usize), len) }
    }

    /// The record header at `pos`: (length, busy, discarded).
    fn header(&self, pos: u64) -> (u64, bool, bool) {
        // SAFETY: the 4-byte, 8-aligned length word of the record header at `pos`.
        let w = unsafe { &*(self.data(pos, 4).as_ptr() as *const AtomicU32) }.load(Ordering::Acquire);
        ((w & !(BUSY_BIT | DISCARD_BIT)) as u64, w & BUSY_BIT != 0, w & DISCARD_BIT != 0)
    }

    /// The producer position, with a full fence before it: the consumer position stored
    /// last must be visible to a producer before we conclude there is nothing new, or a
    /// producer that committed meanwhile may skip the wakeup (it wakes only a consumer
    /// that has caught up with it) and the stream stalls.
    fn producer_after_store(&self) -> u64 {
        fence(Ordering::SeqCst);
        self.producer_pos()
    }

    /// Hands up to `limit` committed records, in order, to `f`. Stops at a record still
    /// being written (it is never skipped).
    pub(crate) fn drain(&mut self, limit: usize, mut f: impl FnMut(&[u8])) -> Drained {
        let mut out = Drained::default();
        let mut cons = self.consumer_pos().load(Ordering::Relaxed);
        let mut handled = 0usize;
        loop {
            let mut prod = self.producer_pos();
            if cons == prod {
                prod = self.producer_after_store();
                if cons == prod {
                    return out;
                }
            }
            if handled >= limit {
                out.more = true;
                return out;
            }
            let (len, busy, discarded) = self.header(cons);
            if busy {
                if !matches!(self.waiting, Some((at, _)) if at == cons) {
                    self.waiting = Some((cons, Instant::now()));
                }
                out.busy = true;
                return out;
            }
            if let Some((at, since)) = self.waiting.take()
                && at == cons
            {
                self.waits.records += 1;
                self.waits.longest = self.waits.longest.max(since.elapsed());
            }
            if !discarded {
                f(self.data(cons + HDR_SZ, len as usize));
                out.records += 1;
            }
            handled += 1;
            cons += (len + HDR_SZ).next_multiple_of(8);
            self.consumer_pos().store(cons, Ordering::Release);
        }
    }

    /// Walks what is left between the consumer and the producer (after a final drain).
    pub(crate) fn leftover(&self) -> Leftover {
        let mut left = Leftover::default();
        let mut pos = self.consumer_pos().load(Ordering::Relaxed);
        let prod = self.producer_after_store();
        while pos < prod {
            let (len, busy, discarded) = self.header(pos);
            if busy {
                left.uncommitted += 1;
            } else if !discarded {
                left.blocked += 1;
            }
            pos += (len + HDR_SZ).next_multiple_of(8);
        }
        left
    }
}

struct Mapping {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Mapping {
    fn new(fd: i32, len: usize, prot: i32, offset: usize) -> std::io::Result<Self> {
        // SAFETY: mapping a BPF ring buffer map's fd as the kernel documents (consumer page
        // read-write at 0, producer page + data twice, read-only, at one page).
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, offset as i64) };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self { ptr, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping what `new` mapped.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

/// The kernel → user ring buffer.
pub struct Ring {
    /// Keeps the map (and its fd) alive.
    map: RingBuf<MapData>,
    _consumer: Mapping,
    _producer: Mapping,
    view: RingView,
}

impl Ring {
    /// `byte_size`: the ring's size (a power-of-two multiple of the page size).
    pub fn new(map: RingBuf<MapData>, byte_size: usize) -> std::io::Result<Self> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let fd = map.as_raw_fd();
        let consumer = Mapping::new(fd, page, libc::PROT_READ | libc::PROT_WRITE, 0)?;
        let producer = Mapping::new(fd, page + 2 * byte_size, libc::PROT_READ, page)?;
        // SAFETY: the kernel's layout: the consumer page starts with the consumer position,
        // the producer page with the producer position, the data (twice) one page after it.
        // The mappings live as long as the view (both are owned by `Ring`).
        let view = unsafe {
            RingView::new(
                consumer.ptr as *const AtomicU64,
                producer.ptr as *const AtomicU64,
                (producer.ptr as *const u8).add(page),
                byte_size,
            )
        };
        Ok(Self { map, _consumer: consumer, _producer: producer, view })
    }

    /// Reads every record committed now (synchronously); returns how many.
    pub fn drain(&mut self, mut f: impl FnMut(&[u8])) -> usize {
        let mut n = 0;
        loop {
            let d = self.view.drain(BATCH, &mut f);
            n += d.records;
            if !d.more {
                return n;
            }
        }
    }

    /// For async use: wait until the kernel signals data.
    pub(crate) fn into_async(self) -> std::io::Result<AsyncRing> {
        // SAFETY: the ring buffer's fd stays open for as long as the AsyncFd owns `self`,
        // and is deregistered (AsyncFd drop) before the map is closed.
        let fd = unsafe { AsyncFd::register(self) }.map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(AsyncRing { fd, last: Drained::default() })
    }
}

impl AsRawFd for Ring {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.map.as_raw_fd()
    }
}

/// Records handed over per batch: between batches the run loop checks its stop signals,
/// flushes its outputs and writes stats. Each record is decoded, enriched (a /proc read, a
/// stack symbolized) and written before the next: on an emulated CPU that is ~0.4 ms, so
/// 4096 records held the loop for 1.6 s and a stats record came late; 256 keep a batch
/// near 100 ms there and far below on hardware.
pub(crate) const BATCH: usize = 256;

pub(crate) struct AsyncRing {
    fd: AsyncFd<Ring>,
    last: Drained,
}

impl AsyncRing {
    /// Waits for data (unless the last batch stopped at its limit), then reads one batch.
    pub(crate) async fn next_batch(&mut self, f: impl FnMut(&[u8])) -> std::io::Result<Drained> {
        if self.last.more {
            tokio::task::yield_now().await;
            self.last = self.fd.get_mut().view.drain(BATCH, f);
            return Ok(self.last);
        }
        let mut guard = self.fd.readable_mut().await?;
        // Clear first, then drain: a record committed after the clear wakes us again.
        guard.clear_ready();
        self.last = guard.get_inner_mut().view.drain(BATCH, f);
        Ok(self.last)
    }

    /// Reads one batch now, without waiting (the watchdog tick: a wakeup can be missed
    /// while the reader waits on a record being written).
    pub(crate) fn drain_now(&mut self, f: impl FnMut(&[u8])) -> Drained {
        self.last = self.fd.get_mut().view.drain(BATCH, f);
        self.last
    }

    pub(crate) fn waits(&self) -> &Waits {
        &self.fd.get_ref().view.waits
    }

    /// At shutdown, with the programs detached: reads each record into `state` with `f`
    /// until `pending(state)` (records the programs committed and the reader has not read)
    /// is zero and the ring is empty, or `deadline` passes; then says what was left.
    pub(crate) async fn finish<S>(
        &mut self,
        state: &mut S,
        mut f: impl FnMut(&mut S, &[u8]),
        pending: impl Fn(&S) -> u64,
        deadline: Duration,
    ) -> Leftover {
        let t0 = Instant::now();
        loop {
            while self.drain_now(|b| f(state, b)).more {}
            let left = self.fd.get_ref().view.leftover();
            let done = left == Leftover::default() && pending(state) == 0;
            if done || t0.elapsed() > deadline {
                return left;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

#[cfg(test)]
mod tests;
