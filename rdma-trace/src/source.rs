//! Event sources: the live ring buffer (the kernel's BPF ring, read through our own
//! mapping of it) or a capture file. Both feed the same decode → correlate → sink pipeline.
//!
//! The reader is ours rather than aya's for one reason: a record whose producer never
//! commits it (its "busy" bit stays set) blocks every record behind it. Seen in the lab
//! (intermittently, on a libibverbs uretprobe record): such a record is skipped after
//! `STUCK_AFTER`, counted, and described, instead of silently stopping the stream. (If
//! its producer was only slow and commits later, that record is lost — and counted.)

use aya::maps::{MapData, RingBuf};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::unix::AsyncFd;

const BUSY_BIT: u32 = 1 << 31;
const DISCARD_BIT: u32 = 1 << 30;
const HDR_SZ: u64 = 8;
/// A record still busy after this long, with committed records behind it, is skipped.
pub const STUCK_AFTER: Duration = Duration::from_secs(1);

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

/// A record skipped because its producer never committed it.
#[derive(Clone, Debug, Default)]
pub struct Stuck {
    pub skipped: u64,
    /// The first skipped record's bytes as far as they were written (often enough to
    /// decode its header: kind, slot, pid/tid).
    pub first: Option<Vec<u8>>,
}

/// The kernel → user ring buffer.
pub struct Ring {
    /// Keeps the map (and its fd) alive.
    map: RingBuf<MapData>,
    consumer: Mapping,
    producer: Mapping,
    mask: u64,
    page: usize,
    busy_since: Option<(u64, Instant)>,
    pub stuck: Stuck,
}

// SAFETY: the mappings are only touched through &mut self.
unsafe impl Send for Ring {}

impl Ring {
    /// `byte_size`: the ring's size (a power-of-two multiple of the page size).
    pub fn new(map: RingBuf<MapData>, byte_size: usize) -> std::io::Result<Self> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let fd = map.as_raw_fd();
        let consumer = Mapping::new(fd, page, libc::PROT_READ | libc::PROT_WRITE, 0)?;
        let producer = Mapping::new(fd, page + 2 * byte_size, libc::PROT_READ, page)?;
        Ok(Self {
            map,
            consumer,
            producer,
            mask: byte_size as u64 - 1,
            page,
            busy_since: None,
            stuck: Stuck::default(),
        })
    }

    fn consumer_pos(&self) -> &AtomicU64 {
        // SAFETY: the consumer page starts with the 8-byte consumer position.
        unsafe { &*(self.consumer.ptr as *const AtomicU64) }
    }

    fn producer_pos(&self) -> u64 {
        // SAFETY: the producer page starts with the 8-byte producer position.
        unsafe { &*(self.producer.ptr as *const AtomicU64) }.load(Ordering::Acquire)
    }

    fn data(&self, off: u64, len: usize) -> &[u8] {
        // SAFETY: data starts one page into the producer mapping and is mapped twice in a
        // row, so `off & mask` plus a record's length stays inside the mapping.
        unsafe {
            let base = (self.producer.ptr as *const u8).add(self.page + (off & self.mask) as usize);
            std::slice::from_raw_parts(base, len)
        }
    }

    /// Hands every record available now to `f`; returns how many.
    pub fn drain(&mut self, mut f: impl FnMut(&[u8])) -> usize {
        let mut n = 0;
        let mut cons = self.consumer_pos().load(Ordering::Relaxed);
        loop {
            let prod = self.producer_pos();
            if cons == prod {
                break;
            }
            // SAFETY: the 4-byte length word of the record header at `cons`.
            let hdr = unsafe { &*(self.data(cons, 4).as_ptr() as *const AtomicU32) }.load(Ordering::Acquire);
            let len = (hdr & !(BUSY_BIT | DISCARD_BIT)) as u64;
            let total = (len + HDR_SZ).next_multiple_of(8);
            if hdr & BUSY_BIT != 0 {
                match self.busy_since {
                    Some((at, since))
                        if at == cons && since.elapsed() > STUCK_AFTER && cons + total < prod =>
                    {
                        self.stuck.skipped += 1;
                        if self.stuck.first.is_none() {
                            self.stuck.first = Some(self.data(cons + HDR_SZ, len as usize).to_vec());
                        }
                        self.busy_since = None;
                    }
                    Some((at, _)) if at == cons => break,
                    _ => {
                        self.busy_since = Some((cons, Instant::now()));
                        break;
                    }
                }
            } else {
                self.busy_since = None;
                if hdr & DISCARD_BIT == 0 {
                    f(self.data(cons + HDR_SZ, len as usize));
                    n += 1;
                }
            }
            cons += total;
            self.consumer_pos().store(cons, Ordering::Release);
        }
        n
    }

    /// For async use: wait until the kernel signals data.
    pub fn into_async(self) -> std::io::Result<AsyncRing> {
        // SAFETY: the ring buffer's fd stays open for as long as the AsyncFd owns `self`,
        // and is deregistered (AsyncFd drop) before the map is closed.
        let fd = unsafe { AsyncFd::register(self) }.map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(AsyncRing { fd })
    }
}

impl AsRawFd for Ring {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.map.as_raw_fd()
    }
}

pub struct AsyncRing {
    fd: AsyncFd<Ring>,
}

impl AsyncRing {
    /// Waits for data, then drains it into `f`.
    pub async fn next_batch(&mut self, f: impl FnMut(&[u8])) -> std::io::Result<usize> {
        let mut guard = self.fd.readable_mut().await?;
        // Clear first, then drain: a record committed after the clear wakes us again. (The
        // other order loses that wakeup, and the kernel only notifies a consumer that has
        // caught up, so the stream would stall.)
        guard.clear_ready();
        Ok(guard.get_inner_mut().drain(f))
    }

    /// Drains whatever is committed now, without waiting (also the stuck-record watchdog:
    /// a stuck record sends no wakeup).
    pub fn drain_now(&mut self, f: impl FnMut(&[u8])) -> usize {
        self.fd.get_mut().drain(f)
    }

    pub fn stuck(&self) -> &Stuck {
        &self.fd.get_ref().stuck
    }

    /// At shutdown, with the producers detached: drains until `read()` reaches `expected`
    /// records, or `patience` runs out.
    pub async fn drain_all(
        &mut self,
        mut f: impl FnMut(&[u8]),
        read: impl Fn() -> u64,
        expected: u64,
        patience: std::time::Duration,
    ) {
        let t0 = std::time::Instant::now();
        loop {
            self.drain_now(&mut f);
            if read() + self.stuck().skipped >= expected || t0.elapsed() > patience {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}
