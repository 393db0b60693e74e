//! What rdma-trace assumes of the machine, in one place. It runs on x86-64 and arm64
//! (aarch64). Each one's facts are data here (`X86_64`, `ARM64`), so both are tested on
//! any host; `HOST` is the one this build runs on. The eBPF programs read arguments from the
//! target's `pt_regs` (`rdma-trace-ebpf`'s `entry_arg`, chosen when they are built for it).
//! The sources of the arm64 facts are in docs/arm64.md.

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!(
    "rdma-trace runs on x86-64 and arm64 (aarch64) only: the probes read those two's argument \
     registers, and plan/arch.rs holds their syscall numbers and page cache modes"
);

use rdma_trace_format::event::FieldId;
use rdma_trace_format::event::FieldId as F;

/// One architecture's facts.
pub(crate) struct Arch {
    /// A kprobe on a function that begins with a landing pad the kernel steps over (x86's
    /// ENDBR64 on kernels built with IBT) reports the function's address plus this; the
    /// shared kprobe programs know a function by both. arm64 probes the first instruction.
    pub entry_pad: u64,
    /// The system calls watched, by this architecture's numbers.
    pub syscalls: &'static [SyscallSpec],
    /// Where the dynamic linker looks for libraries (libibverbs), multiarch first.
    pub lib_dirs: &'static [&'static str],
    /// The cache mode a `pgprot_t` (`vm_page_prot`) selects.
    pub cache_mode: fn(u64) -> &'static str,
}

#[cfg_attr(
    not(target_arch = "x86_64"),
    allow(dead_code, reason = "data, so tests check both tables on any host")
)]
pub(crate) const X86_64: Arch = Arch {
    entry_pad: 4,
    syscalls: X86_64_SYSCALLS,
    lib_dirs: &[
        "/usr/lib/x86_64-linux-gnu",
        "/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/lib64",
        "/usr/lib",
        "/lib",
    ],
    cache_mode: x86_cache_mode,
};

#[cfg_attr(
    not(target_arch = "aarch64"),
    allow(dead_code, reason = "data, so tests check both tables on any host")
)]
pub(crate) const ARM64: Arch = Arch {
    entry_pad: 0,
    syscalls: ARM64_SYSCALLS,
    lib_dirs: &[
        "/usr/lib/aarch64-linux-gnu",
        "/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/lib64",
        "/usr/lib",
        "/lib",
    ],
    cache_mode: arm64_cache_mode,
};

#[cfg(target_arch = "x86_64")]
pub(crate) const HOST: Arch = X86_64;
#[cfg(target_arch = "aarch64")]
pub(crate) const HOST: Arch = ARM64;

/// The system calls watched on this machine.
pub static WATCHED: &[SyscallSpec] = HOST.syscalls;

/// The cache mode a `pgprot_t` selects on this machine.
pub fn cache_mode(prot: u64) -> &'static str {
    (HOST.cache_mode)(prot)
}

/// `RLIMIT_MEMLOCK`, the index into `signal_struct.rlim[]` (include/uapi/asm-generic/
/// resource.h, the same on both; MIPS and Alpha number it 9): the catalog's
/// `signal->rlim[8]` paths, which are string literals, checked against it by a test.
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

#[cfg_attr(
    not(target_arch = "x86_64"),
    allow(dead_code, reason = "data, so tests check both tables on any host")
)]
fn x86_cache_mode(prot: u64) -> &'static str {
    let idx = (((prot & PAGE_PAT) != 0) as usize) << 2
        | (((prot & PAGE_PCD) != 0) as usize) << 1
        | ((prot & PAGE_PWT) != 0) as usize;
    PAT_NAMES[idx]
}

/// arm64: the PTE's AttrIndx (bits 4:2) picks a MAIR entry; Linux 6.12's indexes
/// (arch/arm64/include/asm/memory.h): `pgprot_writecombine` is Normal-NC,
/// `pgprot_noncached` Device-nGnRnE, `pgprot_device` (ioremap) Device-nGnRE. Older kernels
/// numbered them otherwise (docs/arm64.md); an index 6.12 does not use is said as such.
#[cfg_attr(
    not(target_arch = "aarch64"),
    allow(dead_code, reason = "data, so tests check both tables on any host")
)]
fn arm64_cache_mode(prot: u64) -> &'static str {
    match (prot >> 2) & 7 {
        0 => "Normal (cached)",
        1 => "Normal, tagged (cached)",
        2 => "Normal-NC (write-combining)",
        3 => "Device-nGnRnE (uncached)",
        4 => "Device-nGnRE (uncached)",
        _ => "MAIR index unknown to 6.12",
    }
}

/// A system call rdma-trace watches: its number, name and the arguments read.
pub struct SyscallSpec {
    pub nr: u32,
    pub name: &'static str,
    pub args: &'static [FieldId],
    /// Index of the fd argument, if any.
    pub fd_arg: Option<usize>,
}

const fn sc(nr: u32, name: &'static str, args: &'static [FieldId], fd_arg: Option<usize>) -> SyscallSpec {
    SyscallSpec { nr, name, args, fd_arg }
}

const READ: &[FieldId] = &[F::Fd, F::Buf, F::Count];
const OPENAT: &[FieldId] = &[F::Dirfd, F::Pathname, F::Flags, F::Mode];
const DUP3: &[FieldId] = &[F::Fd, F::Newfd, F::Flags];
const FD_CMD_ARG: &[FieldId] = &[F::Fd, F::Cmd, F::Arg];
const MMAP: &[FieldId] = &[F::Addr, F::Len, F::Prot, F::Flags, F::Fd, F::Off];
const PPOLL: &[FieldId] = &[F::Fds, F::Nfds, F::Tsp, F::Sigmask, F::Sigsetsize];
const PSELECT6: &[FieldId] = &[F::Nfds, F::Readfds, F::Writefds, F::Exceptfds, F::Timeout, F::Sig];
const EPOLL_PWAIT: &[FieldId] = &[F::Epfd, F::Events, F::Maxevents, F::TimeoutMs, F::Sigmask];
const EPOLL_PWAIT2: &[FieldId] = &[F::Epfd, F::Events, F::Maxevents, F::Timeout, F::Sigmask];

/// x86-64's numbers (arch/x86/entry/syscalls/syscall_64.tbl); a test checks them against
/// libc's on an x86-64 host.
#[cfg_attr(
    not(target_arch = "x86_64"),
    allow(dead_code, reason = "data, so tests check both tables on any host")
)]
const X86_64_SYSCALLS: &[SyscallSpec] = &[
    sc(0, "read", READ, Some(0)),
    sc(1, "write", READ, Some(0)),
    sc(2, "open", &[F::Pathname, F::Flags, F::Mode], None),
    sc(257, "openat", OPENAT, None),
    sc(3, "close", &[F::Fd], Some(0)),
    sc(32, "dup", &[F::Fd], Some(0)),
    sc(33, "dup2", &[F::Fd, F::Newfd], Some(0)),
    sc(292, "dup3", DUP3, Some(0)),
    sc(72, "fcntl", FD_CMD_ARG, Some(0)),
    sc(16, "ioctl", FD_CMD_ARG, Some(0)),
    sc(9, "mmap", MMAP, Some(4)),
    sc(11, "munmap", &[F::Addr, F::Len], None),
    sc(28, "madvise", &[F::Addr, F::Len, F::Advice], None),
    sc(7, "poll", &[F::Fds, F::Nfds, F::TimeoutMs], None),
    sc(271, "ppoll", PPOLL, None),
    sc(23, "select", &[F::Nfds, F::Readfds, F::Writefds, F::Exceptfds, F::Timeout], None),
    sc(270, "pselect6", PSELECT6, None),
    sc(232, "epoll_wait", &[F::Epfd, F::Events, F::Maxevents, F::TimeoutMs], Some(0)),
    sc(281, "epoll_pwait", EPOLL_PWAIT, Some(0)),
    sc(441, "epoll_pwait2", EPOLL_PWAIT2, Some(0)),
];

/// arm64's numbers: the generic table (include/uapi/asm-generic/unistd.h), which has no
/// open, dup2, poll, select or epoll_wait (libc calls openat, dup3, ppoll, pselect6 and
/// epoll_pwait for them); a test checks them against libc's on an arm64 host.
#[cfg_attr(
    not(target_arch = "aarch64"),
    allow(dead_code, reason = "data, so tests check both tables on any host")
)]
const ARM64_SYSCALLS: &[SyscallSpec] = &[
    sc(63, "read", READ, Some(0)),
    sc(64, "write", READ, Some(0)),
    sc(56, "openat", OPENAT, None),
    sc(57, "close", &[F::Fd], Some(0)),
    sc(23, "dup", &[F::Fd], Some(0)),
    sc(24, "dup3", DUP3, Some(0)),
    sc(25, "fcntl", FD_CMD_ARG, Some(0)),
    sc(29, "ioctl", FD_CMD_ARG, Some(0)),
    sc(222, "mmap", MMAP, Some(4)),
    sc(215, "munmap", &[F::Addr, F::Len], None),
    sc(233, "madvise", &[F::Addr, F::Len, F::Advice], None),
    sc(73, "ppoll", PPOLL, None),
    sc(72, "pselect6", PSELECT6, None),
    sc(22, "epoll_pwait", EPOLL_PWAIT, Some(0)),
    sc(441, "epoll_pwait2", EPOLL_PWAIT2, Some(0)),
];

impl Arch {
    /// The number of the watched call `name`, if this architecture has it.
    pub(crate) fn nr(&self, name: &str) -> Option<u32> {
        self.syscalls.iter().find(|s| s.name == name).map(|s| s.nr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// The host's table against libc's numbers for the same names (the other table is
    /// checked the same way when the tests run on that architecture).
    #[test]
    fn the_hosts_syscall_numbers_are_libcs() {
        #[cfg(target_arch = "x86_64")]
        let libc_nrs: &[(&str, i64)] = &[
            ("open", libc::SYS_open),
            ("dup2", libc::SYS_dup2),
            ("poll", libc::SYS_poll),
            ("select", libc::SYS_select),
            ("epoll_wait", libc::SYS_epoll_wait),
        ];
        #[cfg(target_arch = "aarch64")]
        let libc_nrs: &[(&str, i64)] = &[];
        let common: &[(&str, i64)] = &[
            ("read", libc::SYS_read),
            ("write", libc::SYS_write),
            ("openat", libc::SYS_openat),
            ("close", libc::SYS_close),
            ("dup", libc::SYS_dup),
            ("dup3", libc::SYS_dup3),
            ("fcntl", libc::SYS_fcntl),
            ("ioctl", libc::SYS_ioctl),
            ("mmap", libc::SYS_mmap),
            ("munmap", libc::SYS_munmap),
            ("madvise", libc::SYS_madvise),
            ("ppoll", libc::SYS_ppoll),
            ("pselect6", libc::SYS_pselect6),
            ("epoll_pwait", libc::SYS_epoll_pwait),
            ("epoll_pwait2", libc::SYS_epoll_pwait2),
        ];
        let want: Vec<(&str, u32)> = common.iter().chain(libc_nrs).map(|(n, nr)| (*n, *nr as u32)).collect();
        let mut got: Vec<(&str, u32)> = WATCHED.iter().map(|s| (s.name, s.nr)).collect();
        let mut want = want;
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want);
    }

    /// Both tables name the same calls but for those arm64 lacks, and read the same
    /// arguments of each.
    #[test]
    fn arm64_watches_what_x86_64_does_but_the_calls_it_lacks() {
        let lacks = ["open", "dup2", "poll", "select", "epoll_wait"];
        for x in X86_64.syscalls {
            match ARM64.syscalls.iter().find(|a| a.name == x.name) {
                Some(a) => assert_eq!((a.args, a.fd_arg), (x.args, x.fd_arg), "{}", x.name),
                None => assert!(lacks.contains(&x.name), "arm64 has {}", x.name),
            }
        }
        assert_eq!(ARM64.syscalls.len() + lacks.len(), X86_64.syscalls.len());
        assert_eq!((ARM64.nr("openat"), ARM64.nr("open")), (Some(56), None));
    }

    /// What the kernels' mappers set: x86's PAT entries (write-combining is PWT with
    /// Linux's PAT), arm64's AttrIndx as 6.12's pgprot_writecombine/noncached/device set it.
    #[test]
    fn each_architecture_names_the_cache_modes_its_kernel_sets() {
        // A shared, present user page: x86 0x8000000000000027-style bits without the PAT
        // bits; arm64 PTE_USER | AF | SHARED with AttrIndx 0.
        let x86 = 0x8000_0000_0000_0025u64;
        assert_eq!((X86_64.cache_mode)(x86), "WB (cached)");
        assert_eq!((X86_64.cache_mode)(x86 | PAGE_PWT), "WC (write-combining)");
        assert_eq!((X86_64.cache_mode)(x86 | PAGE_PCD), "UC- (uncached)");
        let arm = (1u64 << 6) | (1 << 10) | (3 << 8) | (1 << 53) | (1 << 54);
        let idx = |i: u64| (arm & !(7 << 2)) | (i << 2);
        assert_eq!((ARM64.cache_mode)(idx(0)), "Normal (cached)");
        assert_eq!((ARM64.cache_mode)(idx(2)), "Normal-NC (write-combining)");
        assert_eq!((ARM64.cache_mode)(idx(3)), "Device-nGnRnE (uncached)");
        assert_eq!((ARM64.cache_mode)(idx(4)), "Device-nGnRE (uncached)");
        assert_eq!((ARM64.cache_mode)(idx(6)), "MAIR index unknown to 6.12");
    }
}
