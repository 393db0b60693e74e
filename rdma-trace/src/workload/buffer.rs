//! The memory behind the MRs: anonymous private mappings, optionally MAP_HUGETLB.
//!
//! Normal buffers are not touched before registration, so the kernel's pin faults the
//! pages in (what `reg_mr` then costs includes that). Huge page buffers are reserved at
//! mmap time: if the pool is short, the mmap fails and we say how to fill the pool.

use std::io;

/// One mapping, unmapped on drop (or by [`Buffer::unmap`]).
pub(crate) struct Buffer {
    addr: *mut u8,
    len: usize,
    mapped: usize,
    hugepages: bool,
}

/// The huge page size and pool from /proc/meminfo: (page bytes, total, free).
pub(crate) fn hugepage_pool() -> Option<(u64, u64, u64)> {
    use procfs::Current;
    let m = procfs::Meminfo::current().ok()?;
    Some((m.hugepagesize?, m.hugepages_total?, m.hugepages_free?))
}

/// Why a buffer could not be mapped (the huge page pool, when asked for, is named).
#[derive(Debug, thiserror::Error)]
pub(crate) enum MapError {
    #[error("--hugepages: this kernel reports no huge pages in /proc/meminfo")]
    NoHugePages,
    #[error(
        "--hugepages: no huge pages available (HugePages_Total {total}, HugePages_Free 0, size \
         {kib} KiB); reserve some first, e.g. `echo 64 > /proc/sys/vm/nr_hugepages`"
    )]
    NoneFree { total: u64, kib: u64 },
    #[error(
        "--hugepages: mmap(MAP_HUGETLB) of {mapped} bytes failed: {source} ({pool}); reserve \
         more with /proc/sys/vm/nr_hugepages"
    )]
    Huge { mapped: usize, source: io::Error, pool: String },
    #[error("mmap of {mapped} bytes failed: {source}")]
    Map { mapped: usize, source: io::Error },
}

impl Buffer {
    /// Maps `len` bytes (rounded up to the page, or huge page, size).
    pub(crate) fn map(len: usize, hugepages: bool) -> Result<Self, MapError> {
        let (page, flags) = if hugepages {
            let Some((size, total, free)) = hugepage_pool() else {
                return Err(MapError::NoHugePages);
            };
            if free == 0 {
                return Err(MapError::NoneFree { total, kib: size / 1024 });
            }
            (size as usize, libc::MAP_HUGETLB)
        } else {
            // SAFETY: sysconf has no memory effects.
            (unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize, 0)
        };
        let mapped = len.div_ceil(page) * page;
        // SAFETY: a fresh anonymous private mapping; no existing memory is affected.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | flags,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            if hugepages {
                let pool = hugepage_pool()
                    .map(|(s, t, f)| {
                        format!("HugePages_Total {t}, HugePages_Free {f}, size {} KiB", s / 1024)
                    })
                    .unwrap_or_default();
                return Err(MapError::Huge { mapped, source: e, pool });
            }
            return Err(MapError::Map { mapped, source: e });
        }
        Ok(Buffer { addr: addr.cast(), len, mapped, hugepages })
    }

    pub(crate) fn addr(&self) -> u64 {
        self.addr as u64
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn mapped_len(&self) -> usize {
        self.mapped
    }

    pub(crate) fn hugepages(&self) -> bool {
        self.hugepages
    }

    /// Fills `[0, n)` with `byte`.
    pub(crate) fn fill(&mut self, n: usize, byte: u8) {
        let n = n.min(self.len);
        // SAFETY: the mapping is readable and writable for `len` bytes and owned by self.
        unsafe { std::ptr::write_bytes(self.addr, byte, n) };
    }

    /// Whether `[0, n)` holds only `byte`. Reads volatile: the device wrote it, not Rust.
    pub(crate) fn holds(&self, n: usize, byte: u8) -> bool {
        let n = n.min(self.len);
        // SAFETY: in bounds of the mapping; volatile because RDMA writes it behind our back.
        (0..n).all(|i| unsafe { std::ptr::read_volatile(self.addr.add(i)) } == byte)
    }

    /// Unmaps now, returning munmap's error.
    pub(crate) fn unmap(mut self) -> io::Result<()> {
        let r = self.do_unmap();
        std::mem::forget(self);
        r
    }

    fn do_unmap(&mut self) -> io::Result<()> {
        // SAFETY: unmaps exactly the mapping this value created, once.
        let rc = unsafe { libc::munmap(self.addr.cast(), self.mapped) };
        if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // Drop cannot report; `unmap` is the reporting path.
        self.do_unmap().ok();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_page_pool_of_this_kernel() {
        // x86-64 kernels report 2 MiB huge pages in /proc/meminfo even with none reserved.
        let (size, total, free) = hugepage_pool().expect("Hugepagesize in /proc/meminfo");
        assert!(size >= 2 << 20 && size.is_power_of_two(), "{size}");
        assert!(free <= total);
    }

    #[test]
    fn a_mapping_rounds_up_and_checks_its_fill() {
        let mut b = Buffer::map(5000, false).unwrap();
        assert_eq!(b.len(), 5000);
        assert_eq!(b.mapped_len() % 4096, 0);
        assert!(b.mapped_len() >= 5000);
        assert!(b.holds(5000, 0), "fresh anonymous memory reads zero");
        b.fill(100, 0xab);
        assert!(b.holds(100, 0xab));
        assert!(!b.holds(101, 0xab));
        b.unmap().unwrap();
    }
}
