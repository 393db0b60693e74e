//! The workload-side syscalls rdma-trace watches, and how their arguments are named.
//!
//! Why these: registration goes through ioctl(2) on the uverbs fd; queue/doorbell pages
//! through mmap(2); soft-RoCE rings its doorbell with write(2) on the uverbs fd; the
//! completion-channel wakeup is a read(2) (or a poll/epoll wait) on the channel fd.

use rdma_trace_common::SyscallLayout;
use rdma_trace_format::event::FieldId;

pub use super::arch::{SyscallSpec, WATCHED};

/// How a syscall argument (or a field a probe event gains after the kernel, such as
/// `pages`) is shown: addresses, commands and flag words in hex, a result as an errno,
/// everything else in decimal.
pub(crate) fn render_of(id: FieldId) -> crate::plan::catalog::Render {
    use crate::plan::catalog::Render;
    use FieldId as F;
    match id {
        // Addresses (user pointers) and bit sets, in hex.
        F::Addr
        | F::Buf
        | F::Arg
        | F::Cmd
        | F::Fds
        | F::Events
        | F::Flags
        | F::Prot
        | F::Off
        | F::Pathname
        | F::Tsp
        | F::Sigmask
        | F::Readfds
        | F::Writefds
        | F::Exceptfds
        | F::Timeout
        | F::Sig => Render::Hex,
        F::Ret => Render::Errno,
        // ints: a descriptor (AT_FDCWD is -100), a timeout in ms (-1 waits forever).
        F::Fd | F::Newfd | F::Dirfd | F::Epfd | F::TimeoutMs => Render::Fd,
        _ => Render::Dec,
    }
}

/// The watched system call of number `nr`.
pub fn by_nr(nr: u64) -> Option<&'static SyscallSpec> {
    WATCHED.iter().find(|s| u64::from(s.nr) == nr)
}

/// The numbers of every watched system call.
pub fn all_nrs() -> Vec<u32> {
    WATCHED.iter().map(|s| s.nr).collect()
}

/// The raw_syscalls (and sched_process_fork) record layout from the format files.
pub(crate) fn layout_from(
    enter: &[crate::plan::kernel::TpField],
    exit: &[crate::plan::kernel::TpField],
    fork: &[crate::plan::kernel::TpField],
) -> Option<SyscallLayout> {
    use crate::plan::kernel::field;
    Some(SyscallLayout {
        enter_id: field(enter, "id")?.offset,
        enter_args: field(enter, "args")?.offset,
        exit_id: field(exit, "id")?.offset,
        exit_ret: field(exit, "ret")?.offset,
        fork_parent: field(fork, "parent_pid")?.offset,
        fork_child: field(fork, "child_pid")?.offset,
        // arm64 has no open(2): no number matches.
        nr_open: super::arch::HOST.nr("open").unwrap_or(u32::MAX),
        nr_openat: super::arch::HOST.nr("openat").unwrap_or(u32::MAX),
    })
}

/// Where the raw_syscalls tracepoints hold the call's number and arguments on this kernel.
pub fn system_layout() -> std::io::Result<SyscallLayout> {
    let enter = crate::plan::kernel::tracepoint_format("raw_syscalls", "sys_enter")?;
    let exit = crate::plan::kernel::tracepoint_format("raw_syscalls", "sys_exit")?;
    let fork = crate::plan::kernel::tracepoint_format("sched", "sched_process_fork")?;
    layout_from(&enter, &exit, &fork).ok_or_else(|| {
        std::io::Error::other("raw_syscalls/sched_process_fork formats lack id/args/ret/parent_pid/child_pid")
    })
}
