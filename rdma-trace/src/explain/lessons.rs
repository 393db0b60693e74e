//! What each path means, in words: the explanations `explain`, the TUI (`e` on an event) and
//! the guides share. Each text is true of the kernels in the lab (Linux 6.12 and 7.3) and
//! names functions only through the frames table (`frames.rs`) or the events themselves,
//! so what it names is what that kernel ran.

/// The topics of `rdma-trace explain`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Topic {
    /// Memory registration: pinning and RLIMIT_MEMLOCK.
    Mr,
    /// Doorbell and queue mmaps.
    Mmap,
    /// Interrupt (or worker) to completion event to the program's wakeup.
    Cq,
    /// Kernel bypass: the data phase's syscalls per work request.
    Bypass,
    /// fork() and pinned memory: MADV_DONTFORK and copy-on-fork.
    Fork,
}

impl Topic {
    /// Every topic, in the order they are taught.
    pub const ALL: [Topic; 5] = [Topic::Mr, Topic::Mmap, Topic::Cq, Topic::Bypass, Topic::Fork];

    /// The topic's name on the command line (`mr`, `mmap`, `cq`, `bypass`, `fork`).
    pub fn as_str(self) -> &'static str {
        match self {
            Topic::Mr => "mr",
            Topic::Mmap => "mmap",
            Topic::Cq => "cq",
            Topic::Bypass => "bypass",
            Topic::Fork => "fork",
        }
    }

    pub(crate) fn title(self) -> &'static str {
        match self {
            Topic::Mr => "Memory registration: pinning the pages the NIC will use",
            Topic::Mmap => "Doorbell and queue mmaps",
            Topic::Cq => "From the NIC (or its worker) to the program's wakeup: a completion event",
            Topic::Bypass => "Kernel bypass: the data phase without the kernel",
            Topic::Fork => "fork() and pinned memory",
        }
    }

    /// The topic of an event's path, for the TUI.
    pub(crate) fn of_path(p: crate::plan::catalog::Path) -> Option<Topic> {
        use crate::plan::catalog::Path;
        match p {
            Path::Pin | Path::Teardown => Some(Topic::Mr),
            Path::Mmap => Some(Topic::Mmap),
            Path::Completion => Some(Topic::Cq),
            _ => None,
        }
    }
}

pub(crate) const PIN_WHY: &str = "The NIC reads and writes a registered buffer by DMA, on its own, long after the call \
returned and with no CPU involved. So the pages must stay in RAM at the same physical addresses until the MR is \
deregistered: the kernel pins them (FOLL_LONGTERM: no swapping, no migration) and gives the NIC their addresses \
(the provider's translation table; the lkey and rkey name it). Pinned pages cannot be reclaimed, so they are \
charged to the process's RLIMIT_MEMLOCK (`ulimit -l`), unless it has CAP_IPC_LOCK (root has).";

pub(crate) const PIN_ENOMEM: &str = "When the charge would pass RLIMIT_MEMLOCK, the umem function returns -ENOMEM and \
ibv_reg_mr fails with errno 12 (ENOMEM). It is not a shortage of memory but the limit: raise `ulimit -l` (or \
memlock in limits.conf / LimitMEMLOCK= for a service), register less, or run with CAP_IPC_LOCK.";

pub(crate) const MMAP_WHY: &str = "Set-up goes through the kernel; the data path must not. So at set-up the provider \
maps into the process what the fast path needs: on hardware the doorbell (UAR) page of the NIC — device memory, \
mapped write-combining (BlueFlame) or uncached, so a store from user space reaches the NIC at once — and \
queue buffers in host memory; on soft-RoCE the queue buffers only (its 'NIC' is kernel code).";

pub(crate) const MMAP_OFFSET: &str = "mmap(2)'s offset is not a file position here: it is a key the kernel handed out. \
mlx5 encodes a command and an index in it (the command in bits 8–15: a UAR page, a BlueFlame page, the clock \
page, device memory; the index in bits 0–7, extended by bits 16–23), decodes it in mlx5_ib_mmap and remaps the page with \
rdma_user_mmap_io. soft-RoCE hands out a key per queue buffer in the create command's reply and looks it up in \
rxe_mmap.";

pub(crate) const MMAP_RXE_KEY: &str = "soft-RoCE's queues live in kernel memory (vmalloc) that the program and the \
kernel share. When a CQ, QP or SRQ is made, rxe_create_mmap_info gives its buffer a key (the device's next free \
offset) and the create command's reply carries it to the provider library, which maps it at once: rxe_mmap finds \
the key among its context's pending buffers by vm_pgoff << 12. The buffer starts with the producer and consumer \
indexes, each on a cache line of its own, then the ring; one slot is always left free, so a full ring is told from \
an empty one.";

pub(crate) const MMAP_WC: &str = "Why write-combining for a doorbell on hardware: the CPU may gather the stores of a \
work request (BlueFlame writes the whole descriptor into the doorbell page) into one burst on PCIe, instead of \
one uncached transaction per word; the NIC sees the descriptor without fetching it from host memory.";

pub(crate) const CQ_ARM: &str = "A completion event is raised only for a CQ armed with ibv_req_notify_cq, and only once \
per arming: the program arms, waits, takes the event (ibv_get_cq_event), acknowledges it, re-arms, and polls \
the CQ for the completions themselves. A CQ that is only polled never takes this path.";

/// How a provider arms a CQ, where no probe sees it (ibv_req_notify_cq is inline).
pub(crate) const CQ_ARM_WAYS: &str = "ibv_req_notify_cq is inline in libibverbs and calls the provider, which \
arms the CQ: soft-RoCE with a system call on the uverbs fd, mlx5 in user space with a store to the CQ's \
doorbell record";

pub(crate) const CQ_CONTEXT: &str = "ib_uverbs_comp_handler queues an event on the completion channel and wakes \
whoever sleeps in read(2) on it. It runs wherever the NIC's side notices the completion, and the frames \
under it say where: on hardware the completion interrupt's softirq (the mlx5 CQ tasklet); on soft-RoCE \
the thread that runs the software NIC's tasks, a kworker where they are queued work, or a tasklet where \
they are tasklets.";

pub(crate) const CQ_IN_KWORKER: &str = "Here a kworker ran it: soft-RoCE queued its task as work, so the \
handler ran on whichever CPU the worker got, never in the program.";

pub(crate) const CQ_IN_SYSCALL_SOFTIRQ: &str = "Here it ran inside the program's own system call: soft-RoCE \
handed the completion to a tasklet, and the kernel runs pending tasklets (a softirq) when a thread \
re-enables bottom halves, here inside that call. The completion was queued before the call returned to \
the program, with no interrupt and no other thread.";

pub(crate) const CQ_IN_SYSCALL: &str = "Here it ran inside the program's own system call, directly: the \
software NIC did its work in the caller's thread before the call returned.";

pub(crate) const CQ_IN_SOFTIRQ: &str = "Here a softirq ran it after an interrupt: whatever thread was on that \
CPU was interrupted, and the program slept elsewhere.";

pub(crate) const CQ_IN_KSOFTIRQD: &str = "Here ksoftirqd ran it: softirqs that keep coming back are handed to \
the per-CPU ksoftirqd thread, which adds a scheduling delay before the handler.";

pub(crate) const CQ_IN_HARDIRQ: &str = "Here it ran in the interrupt handler itself.";

pub(crate) const CQ_RAN_UNKNOWN: &str = "This event kept no kernel stack, so where it ran is not known from the \
capture.";

pub(crate) const CQ_POST: &str = "A receive completion begins with a send on the other end of the connection: its \
program posted a work request and rang the doorbell (on soft-RoCE a write(2) into rxe_post_send; on hardware a \
store to the mapped doorbell page, with no kernel event). The sender's NIC read the WQE and put the message on \
the wire; this host's NIC matched it to the QP its peer named at RTR, consumed a posted receive, wrote a CQE \
and, the CQ being armed, raised the completion event. A send completion follows the QP's own post: the peer \
acknowledged what it sent.";

pub(crate) const CQ_LATER: &str = "The program wakes later: the scheduler has to run the woken thread, which then \
returns from read(2) and from ibv_get_cq_event. That is the wakeup latency; busy polling (ibv_poll_cq in a loop) \
avoids it at the cost of a CPU.";

pub(crate) const BYPASS_WHY: &str = "Posting a work request on hardware is a few stores to memory and one to the mapped \
doorbell page: no system call. The kernel is needed only for set-up (open, register, create, map) and for \
completion events. soft-RoCE has no doorbell to map: its provider rings it with a write(2) on the uverbs fd, one \
per post, so this run's count is soft-RoCE's, not a NIC's.";

pub(crate) const BYPASS_HW: &str = "Expected on a hardware NIC (not measured here: the lab has none): 0 syscalls per \
work request in the data phase; with completion events, one read(2) per event on the completion channel.";

pub(crate) const POLL_VS_EVENT: &str = "Event mode sleeps in read(2) on the completion channel until the handler wakes \
it: one syscall per event, and the wakeup latency. Busy polling calls ibv_poll_cq, which reads the CQ in mapped \
memory: no syscall, no wakeup, one CPU spinning.";

pub(crate) const FORK_WHY: &str = "After fork() parent and child share their pages copy-on-write. If the parent writes \
to a registered page first, it gets a new copy while the NIC keeps the old one: the parent's data no longer \
reaches the NIC. libibverbs used to prevent this with madvise(MADV_DONTFORK) on every registered range (after \
ibv_fork_init, or with RDMAV_FORK_SAFE set), so the child does not get those pages at all.";

pub(crate) const FORK_COW: &str = "Newer kernels copy a pinned page at fork() time instead (the child gets the copy, the \
parent keeps the pinned page the NIC uses), and say so to user space (since 5.12): `rdma sys show` prints \
copy-on-fork on. libibverbs then issues no madvise at all.";

#[cfg(test)]
mod tests {
    #[test]
    fn every_topic_has_a_title_and_a_name() {
        for t in super::Topic::ALL {
            assert!(!t.title().is_empty() && !t.as_str().is_empty());
        }
    }
}
