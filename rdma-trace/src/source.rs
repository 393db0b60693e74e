//! Event sources: the live ring buffer (aya edge) or a capture file. Both hand raw
//! records or events to the same decode → correlate → sink pipeline.

use aya::maps::{MapData, RingBuf};
use std::os::fd::AsRawFd;
use tokio::io::unix::AsyncFd;

/// The kernel → user ring buffer.
pub struct Ring {
    inner: RingBuf<MapData>,
}

impl Ring {
    pub fn new(inner: RingBuf<MapData>) -> Self {
        Self { inner }
    }

    /// Hands every record available now to `f`; returns how many.
    pub fn drain(&mut self, mut f: impl FnMut(&[u8])) -> usize {
        let mut n = 0;
        while let Some(item) = self.inner.next() {
            f(&item);
            n += 1;
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
        self.inner.as_raw_fd()
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

    /// Drains whatever is committed now, without waiting.
    pub fn drain_now(&mut self, f: impl FnMut(&[u8])) -> usize {
        self.fd.get_mut().drain(f)
    }

    /// At shutdown, with the producers detached: drains until `read()` reaches `expected`
    /// records (a record a preempted producer is still writing stops a drain), or
    /// `patience` runs out.
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
            if read() >= expected || t0.elapsed() > patience {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}
