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
        let n = guard.get_inner_mut().drain(f);
        guard.clear_ready();
        Ok(n)
    }

    /// Drains whatever is left without waiting (at shutdown: nothing captured is lost).
    pub fn drain_now(&mut self, f: impl FnMut(&[u8])) -> usize {
        self.fd.get_mut().drain(f)
    }
}
