//! What rdma-trace assumes of the machine, in one place: it is built for x86-64 only, and
//! these are the facts that would change on another architecture. The eBPF programs read
//! arguments from x86-64's `pt_regs` (rdi, rsi, rdx, rcx, r8, r9; the 7th and 8th from the
//! stack: `rdma-trace-ebpf`'s `arg`), which is why a build for another target stops here.

#[cfg(not(target_arch = "x86_64"))]
compile_error!(
    "rdma-trace supports x86-64 only: the probes read x86-64 argument registers, and the \
     syscall table, ENDBR and PAT facts in plan/arch.rs are x86-64's"
);

/// A kprobe placed past a function's ENDBR64 (kernels built with IBT) reports the
/// function's address plus this: the shared kprobe programs know a function by both.
pub(crate) const ENDBR_LEN: u64 = 4;

/// `RLIMIT_MEMLOCK`, the index into `signal_struct.rlim[]` (include/uapi/asm-generic/
/// resource.h; MIPS and Alpha number it 9): the catalog's `signal->rlim[8]` paths, which
/// are string literals, checked against it by a test.
#[cfg(test)]
pub(crate) const RLIMIT_MEMLOCK: usize = 8;

/// x86 page attribute bits (arch/x86/include/asm/pgtable_types.h) and the PAT table
/// Linux programs (arch/x86/mm/pat/memtype.c): index = PAT<<2 | PCD<<1 | PWT.
pub(crate) const PAGE_PWT: u64 = 1 << 3;
pub(crate) const PAGE_PCD: u64 = 1 << 4;
pub(crate) const PAGE_PAT: u64 = 1 << 7;
const PAT_NAMES: [&str; 8] = [
    "WB (cached)",
    "WC (write-combining)",
    "UC- (uncached)",
    "UC (uncached)",
    "WB (cached)",
    "WP",
    "UC- (uncached)",
    "WT",
];

/// The cache mode a `pgprot_t` selects on x86-64.
pub fn cache_mode(prot: u64) -> &'static str {
    let idx = (((prot & PAGE_PAT) != 0) as usize) << 2
        | (((prot & PAGE_PCD) != 0) as usize) << 1
        | ((prot & PAGE_PWT) != 0) as usize;
    PAT_NAMES[idx]
}

use rdma_trace_format::event::FieldId;
use rdma_trace_format::event::FieldId as F;

/// The workload-side syscalls rdma-trace watches, by x86-64's numbers (several of them,
/// `open`, `poll`, `select`, `dup2`, `epoll_wait`, exist on x86-64 and not on newer
/// architectures).
pub struct SyscallSpec {
    pub nr: u32,
    pub name: &'static str,
    pub args: &'static [FieldId],
    /// Index of the fd argument, if any.
    pub fd_arg: Option<usize>,
}

const fn sc(nr: i64, name: &'static str, args: &'static [FieldId], fd_arg: Option<usize>) -> SyscallSpec {
    SyscallSpec { nr: nr as u32, name, args, fd_arg }
}

/// The system calls watched, with their x86-64 numbers and the arguments read.
pub static WATCHED: &[SyscallSpec] = &[
    sc(libc::SYS_read, "read", &[F::Fd, F::Buf, F::Count], Some(0)),
    sc(libc::SYS_write, "write", &[F::Fd, F::Buf, F::Count], Some(0)),
    sc(libc::SYS_open, "open", &[F::Pathname, F::Flags, F::Mode], None),
    sc(libc::SYS_openat, "openat", &[F::Dirfd, F::Pathname, F::Flags, F::Mode], None),
    sc(libc::SYS_close, "close", &[F::Fd], Some(0)),
    sc(libc::SYS_dup, "dup", &[F::Fd], Some(0)),
    sc(libc::SYS_dup2, "dup2", &[F::Fd, F::Newfd], Some(0)),
    sc(libc::SYS_dup3, "dup3", &[F::Fd, F::Newfd, F::Flags], Some(0)),
    sc(libc::SYS_fcntl, "fcntl", &[F::Fd, F::Cmd, F::Arg], Some(0)),
    sc(libc::SYS_ioctl, "ioctl", &[F::Fd, F::Cmd, F::Arg], Some(0)),
    sc(libc::SYS_mmap, "mmap", &[F::Addr, F::Len, F::Prot, F::Flags, F::Fd, F::Off], Some(4)),
    sc(libc::SYS_munmap, "munmap", &[F::Addr, F::Len], None),
    sc(libc::SYS_madvise, "madvise", &[F::Addr, F::Len, F::Advice], None),
    sc(libc::SYS_poll, "poll", &[F::Fds, F::Nfds, F::TimeoutMs], None),
    sc(libc::SYS_ppoll, "ppoll", &[F::Fds, F::Nfds, F::Tsp, F::Sigmask, F::Sigsetsize], None),
    sc(libc::SYS_select, "select", &[F::Nfds, F::Readfds, F::Writefds, F::Exceptfds, F::Timeout], None),
    sc(
        libc::SYS_pselect6,
        "pselect6",
        &[F::Nfds, F::Readfds, F::Writefds, F::Exceptfds, F::Timeout, F::Sig],
        None,
    ),
    sc(libc::SYS_epoll_wait, "epoll_wait", &[F::Epfd, F::Events, F::Maxevents, F::TimeoutMs], Some(0)),
    sc(
        libc::SYS_epoll_pwait,
        "epoll_pwait",
        &[F::Epfd, F::Events, F::Maxevents, F::TimeoutMs, F::Sigmask],
        Some(0),
    ),
    sc(
        libc::SYS_epoll_pwait2,
        "epoll_pwait2",
        &[F::Epfd, F::Events, F::Maxevents, F::Timeout, F::Sigmask],
        Some(0),
    ),
];

#[cfg(test)]
mod tests {
    #[test]
    fn the_catalogs_memlock_paths_index_rlimit_memlock() {
        let index = format!("rlim[{}]", super::RLIMIT_MEMLOCK);
        let paths: Vec<&str> = crate::plan::catalog::CATALOG
            .iter()
            .flat_map(|p| p.entry.iter().chain(p.ret))
            .filter(|f| f.from == crate::plan::catalog::Src::Task && f.path.starts_with("signal->rlim"))
            .map(|f| f.path)
            .collect();
        assert!(!paths.is_empty() && paths.iter().all(|p| p.contains(&index)), "{paths:?}");
    }
}
