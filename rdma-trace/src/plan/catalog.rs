//! The probe catalog: the single source of truth for what rdma-trace attaches to.
//!
//! Each spec names the kernel function (alternatives in order, with the module whose BTF
//! describes it), the parameters it reads *by name* and the struct fields behind them.
//! Positions and offsets are resolved from the running kernel's BTF at load time
//! (`select.rs`); nothing here is a byte offset.

pub use rdma_trace_format::event::{FieldId, Path, ProbeId};

/// How a probe is attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// kprobe at entry, kretprobe at return.
    Kprobe,
    /// A kernel tracepoint `category:name`, fields read from its format.
    Tracepoint { category: &'static str },
    /// uprobe at entry, uretprobe at return, on a shared library's function (default
    /// symbol version).
    Uprobe { library: &'static str },
}

/// A symbol alternative and the module whose BTF describes it (`vmlinux` for built-in).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Symbol {
    pub name: &'static str,
    pub module: &'static str,
}

/// Where a value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Src {
    /// A parameter, by name (alternatives separated by `|`, e.g. `access|access_flags`).
    Param(&'static str),
    /// The return value.
    Ret,
    /// The task the probed call runs for (`current`, a `struct task_struct *`), read at
    /// the hit: `path` starts inside the task (e.g. `signal->rlim[8].rlim_cur`).
    Task,
    /// A field of the tracepoint record, by name.
    TpField(&'static str),
    /// Argument `n` of a user-space function (no BTF there: the C ABI gives positions).
    UserArg(u8),
    /// The return value of a user-space function.
    UserRet,
}

/// How a value is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Render {
    Hex,
    Dec,
    /// Signed return code (0 or -errno).
    Errno,
    /// A returned pointer that may be an ERR_PTR.
    PtrOrErr,
    /// `enum ib_access_flags` bits.
    Access,
    /// `vm_flags` bits (VM_IO, VM_PFNMAP, …).
    VmFlags,
    /// `pgprot_t`: the page cache mode (write-combining, uncached, write-back).
    PgProt,
    /// mlx5's `vm_pgoff` encoding: mmap command + index (UAR, BlueFlame, clock, device memory).
    Mlx5Pgoff,
    /// A file descriptor: a C `int`, so -1 (an anonymous mmap's) reads as -1.
    Fd,
    /// `enum ib_qp_state`: RESET, INIT, RTR, RTS, SQD, SQE, ERR.
    QpState,
    /// Half of a GID (8 bytes as they lie in memory), written as sysfs writes GIDs:
    /// 16-bit groups in network order (`0000:ffff:0a00:0002`).
    GidHalf,
}

/// One value a probe reads: `from`, then the field path behind it.
/// `path` is empty for the value itself; `a.b` walks embedded members; `->` follows a pointer
/// (e.g. `uobject->uevent.uobject.user_handle`); a leading `(name)` reads a loosely typed
/// pointer (`void *`) as a pointer to `struct name`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// Its name in the event: `f("addr", …)` makes `FieldId::Addr`, and a name `FieldId`
    /// does not list stops the build.
    pub id: FieldId,
    pub from: Src,
    pub path: &'static str,
    pub render: Render,
}

/// One catalog probe: where it attaches, what it reads, which path it belongs to.
#[derive(Clone, Copy, Debug)]
pub struct ProbeSpec {
    pub id: ProbeId,
    pub path: Path,
    pub kind: Kind,
    pub symbols: &'static [Symbol],
    pub entry: &'static [Field],
    /// Read at return (kprobes only).
    pub ret: &'static [Field],
    /// Capture the kernel stack at entry.
    pub stack: bool,
    /// Only a hardware NIC driver takes this path (soft-RoCE never calls it).
    pub hardware_only: bool,
    /// What this probe shows, in RDMA terms.
    pub about: &'static str,
}

const fn f(name: &'static str, from: Src, path: &'static str, render: Render) -> Field {
    Field { id: FieldId::named(name), from, path, render }
}

impl Field {
    /// The field's name in an event.
    pub const fn name(&self) -> &'static str {
        self.id.as_str()
    }
}
const fn sym(name: &'static str, module: &'static str) -> Symbol {
    Symbol { name, module }
}

use Render::*;
use Src::{Param, Ret, Task, TpField, UserArg, UserRet};

const VMA_FIELDS: [Field; 5] = [
    f("vm_start", Param("vma"), "vm_start", Hex),
    f("vm_end", Param("vma"), "vm_end", Hex),
    f("vm_pgoff", Param("vma"), "vm_pgoff", Hex),
    f("vm_flags", Param("vma"), "vm_flags", VmFlags),
    f("vm_page_prot", Param("vma"), "vm_page_prot", PgProt),
];
/// The same VMA and the user context rxe looks the key up in.
const RXE_MMAP_ENTRY: [Field; 6] = [
    VMA_FIELDS[0],
    VMA_FIELDS[1],
    VMA_FIELDS[2],
    VMA_FIELDS[3],
    VMA_FIELDS[4],
    f("context", Param("context"), "", Hex),
];
/// The same VMA, with vm_pgoff decoded the way mlx5 encodes it.
const MLX5_VMA_FIELDS: [Field; 5] = {
    let mut v = VMA_FIELDS;
    v[2].render = Mlx5Pgoff;
    v
};
// The kernel CQ's user handle is filled in only after the driver's create_cq returns
// (seen in the lab: 0 at entry), so completions are joined to it by the kernel CQ pointer.
const CREATE_CQ_ENTRY: [Field; 3] = [
    f("cq", Param("ibcq"), "", Hex),
    f("cqe", Param("attr"), "cqe", Dec),
    f("comp_vector", Param("attr"), "comp_vector", Dec),
];
const RET_CODE: [Field; 1] = [f("ret", Ret, "", Errno)];
const REG_MR_ENTRY: [Field; 7] = [
    f("start", Param("start"), "", Hex),
    f("length", Param("length"), "", Dec),
    f("iova", Param("iova"), "", Hex),
    f("access", Param("access|access_flags"), "", Access),
    // The 6th parameter on 6.12, the 7th (read from the stack) on 7.x.
    f("udata", Param("udata"), "", Hex),
    // Driver-private command/response bytes the provider library sent.
    f("udata_inlen", Param("udata"), "inlen", Dec),
    f("udata_outlen", Param("udata"), "outlen", Dec),
];
// The core fills ib_mr.iova/length only after the driver returns, so they are not read here.
const REG_MR_RET: [Field; 3] =
    [f("mr", Ret, "", PtrOrErr), f("lkey", Ret, "lkey", Hex), f("rkey", Ret, "rkey", Hex)];

const DMABUF_ENTRY: [Field; 4] = [
    f("offset", Param("offset"), "", Hex),
    f("size", Param("size"), "", Dec),
    f("fd", Param("fd"), "", Dec),
    f("access", Param("access"), "", Access),
];
const REREG_ENTRY: [Field; 5] = [
    f("mr", Param("ibmr|ib_mr"), "", Hex),
    f("flags", Param("flags"), "", Hex),
    f("start", Param("start"), "", Hex),
    f("length", Param("length"), "", Dec),
    f("access", Param("access|new_access_flags"), "", Access),
];

// 8 is RLIMIT_MEMLOCK, the index into `signal_struct.rlim[]` (`arch::RLIMIT_MEMLOCK`;
// a test holds the two together).
const MEMLOCK_CUR: &str = "signal->rlim[8].rlim_cur";
const MEMLOCK_MAX: &str = "signal->rlim[8].rlim_max";

/// Every probe rdma-trace knows. Order is display order.
pub static CATALOG: &[ProbeSpec] = &[
    ProbeSpec {
        id: ProbeId::UmemGet,
        path: Path::Pin,
        kind: Kind::Kprobe,
        symbols: &[sym("ib_umem_get", "ib_uverbs"), sym("__ib_umem_get_va", "ib_core")],
        entry: &[
            f("addr", Param("addr"), "", Hex),
            f("size", Param("size"), "", Dec),
            f("access", Param("access"), "", Access),
            // What the pin is charged against, read when it happens (a process refused
            // ENOMEM usually exits before /proc could be read): the soft and hard
            // RLIMIT_MEMLOCK (RLIM_INFINITY is u64::MAX), and the pages the mm already
            // pins (`pinned_vm`, which ib_umem_get adds to and checks against the limit).
            f("memlock_limit", Task, MEMLOCK_CUR, Dec),
            f("memlock_max", Task, MEMLOCK_MAX, Dec),
            f("pinned_vm_pages", Task, "mm->pinned_vm.counter", Dec),
        ],
        ret: &[
            f("umem", Ret, "", PtrOrErr),
            f("umem_address", Ret, "address", Hex),
            f("umem_length", Ret, "length", Dec),
            f("umem_iova", Ret, "iova", Hex),
        ],
        stack: true,
        hardware_only: false,
        about: "pins the user pages of a memory region (pin_user_pages, charged to RLIMIT_MEMLOCK)",
    },
    ProbeSpec {
        id: ProbeId::RxeRegMr,
        path: Path::Pin,
        kind: Kind::Kprobe,
        symbols: &[sym("rxe_reg_user_mr", "rdma_rxe")],
        entry: &REG_MR_ENTRY,
        ret: &REG_MR_RET,
        stack: true,
        hardware_only: false,
        about: "soft-RoCE registers a user MR: pins it through the umem, returns lkey/rkey",
    },
    ProbeSpec {
        id: ProbeId::Mlx5RegMr,
        path: Path::Pin,
        kind: Kind::Kprobe,
        symbols: &[sym("mlx5_ib_reg_user_mr", "mlx5_ib")],
        entry: &REG_MR_ENTRY,
        ret: &REG_MR_RET,
        stack: true,
        hardware_only: true,
        about: "ConnectX registers a user MR (mkey in the NIC's translation tables)",
    },
    ProbeSpec {
        id: ProbeId::UmemOdpGet,
        path: Path::Pin,
        kind: Kind::Kprobe,
        symbols: &[sym("ib_umem_odp_get", "ib_core")],
        entry: &[
            f("addr", Param("addr"), "", Hex),
            f("size", Param("size"), "", Dec),
            f("access", Param("access"), "", Access),
        ],
        ret: &[
            f("umem_odp", Ret, "", PtrOrErr),
            f("umem_address", Ret, "umem.address", Hex),
            f("umem_length", Ret, "umem.length", Dec),
        ],
        stack: true,
        hardware_only: false,
        about: "registers an on-demand-paging (ODP) MR: nothing is pinned or charged; pages are mapped as the device faults on them",
    },
    ProbeSpec {
        id: ProbeId::OdpFault,
        path: Path::Pin,
        kind: Kind::Kprobe,
        symbols: &[sym("ib_umem_odp_map_dma_and_lock", "ib_core")],
        entry: &[
            f("umem_odp", Param("umem_odp"), "", Hex),
            f("user_virt", Param("user_virt"), "", Hex),
            f("bcnt", Param("bcnt"), "", Dec),
            f("fault", Param("fault"), "", Dec),
        ],
        // The pages it mapped, or -errno.
        ret: &[f("ret", Ret, "", Errno)],
        stack: false,
        hardware_only: false,
        about: "maps an ODP MR's pages for the device: a page fault it took, or a prefetch",
    },
    ProbeSpec {
        id: ProbeId::UmemDmabufGet,
        path: Path::Pin,
        kind: Kind::Kprobe,
        symbols: &[sym("ib_umem_dmabuf_get", "ib_core")],
        entry: &DMABUF_ENTRY,
        ret: &[f("umem_dmabuf", Ret, "", PtrOrErr)],
        stack: true,
        hardware_only: true,
        about: "registers a dma-buf MR: another device's memory (a GPU's) exported as an fd, moved when the exporter says so",
    },
    ProbeSpec {
        id: ProbeId::UmemDmabufPinned,
        path: Path::Pin,
        kind: Kind::Kprobe,
        symbols: &[sym("ib_umem_dmabuf_get_pinned", "ib_core")],
        entry: &DMABUF_ENTRY,
        ret: &[f("umem_dmabuf", Ret, "", PtrOrErr)],
        stack: true,
        hardware_only: true,
        about: "registers a dma-buf MR whose memory the exporter pins for the MR's life",
    },
    ProbeSpec {
        id: ProbeId::RxeRereg,
        path: Path::Pin,
        kind: Kind::Kprobe,
        symbols: &[sym("rxe_rereg_user_mr", "rdma_rxe")],
        entry: &REREG_ENTRY,
        ret: &[f("mr", Ret, "", PtrOrErr)],
        stack: true,
        hardware_only: false,
        about: "soft-RoCE re-registers an MR (ibv_rereg_mr): its PD or access; a new range it refuses",
    },
    ProbeSpec {
        id: ProbeId::Mlx5Rereg,
        path: Path::Pin,
        kind: Kind::Kprobe,
        symbols: &[sym("mlx5_ib_rereg_user_mr", "mlx5_ib")],
        entry: &REREG_ENTRY,
        ret: &[f("mr", Ret, "", PtrOrErr)],
        stack: true,
        hardware_only: true,
        about: "mlx5 re-registers an MR (ibv_rereg_mr): a new range, PD or access, in place or as a new MR",
    },
    ProbeSpec {
        id: ProbeId::UverbsMmap,
        path: Path::Mmap,
        kind: Kind::Kprobe,
        symbols: &[sym("ib_uverbs_mmap", "ib_uverbs")],
        entry: &VMA_FIELDS,
        ret: &RET_CODE,
        stack: true,
        hardware_only: false,
        about: "mmap on the uverbs fd: the provider maps doorbell/UAR pages or queue buffers",
    },
    ProbeSpec {
        id: ProbeId::RxeMmapInfo,
        path: Path::Mmap,
        kind: Kind::Kprobe,
        symbols: &[sym("rxe_create_mmap_info", "rdma_rxe")],
        entry: &[
            f("size", Param("size"), "", Dec),
            // `obj` is the queue's buffer (`void *` in the prototype), its header already
            // written by rxe_queue_init: slots - 1 and log2 of the element size.
            f("index_mask", Param("obj"), "(rxe_queue_buf)index_mask", Dec),
            f("log2_elem_size", Param("obj"), "(rxe_queue_buf)log2_elem_size", Dec),
        ],
        ret: &[
            f("info", Ret, "", PtrOrErr),
            f("context", Ret, "context", Hex),
            // The key rxe_mmap looks the buffer up by: vm_pgoff << PAGE_SHIFT, in bytes.
            f("key", Ret, "info.offset", Hex),
            f("info_size", Ret, "info.size", Dec),
        ],
        // The frame above do_mmap_info says which queue (CQ, SQ/RQ, SRQ, a resize).
        stack: true,
        hardware_only: false,
        about: "soft-RoCE hands a queue buffer (CQ, send/receive queue, SRQ) a key the program will mmap",
    },
    ProbeSpec {
        id: ProbeId::RxeMmap,
        path: Path::Mmap,
        kind: Kind::Kprobe,
        symbols: &[sym("rxe_mmap", "rdma_rxe")],
        entry: &RXE_MMAP_ENTRY,
        ret: &RET_CODE,
        stack: true,
        hardware_only: false,
        about: "soft-RoCE maps a queue buffer (vmalloc memory) into the process",
    },
    ProbeSpec {
        id: ProbeId::Mlx5Mmap,
        path: Path::Mmap,
        kind: Kind::Kprobe,
        symbols: &[sym("mlx5_ib_mmap", "mlx5_ib")],
        entry: &MLX5_VMA_FIELDS,
        ret: &RET_CODE,
        stack: true,
        hardware_only: true,
        about: "ConnectX decodes vm_pgoff into a command + index (UAR, BlueFlame, clock, device memory)",
    },
    ProbeSpec {
        id: ProbeId::MmapIo,
        path: Path::Mmap,
        kind: Kind::Kprobe,
        symbols: &[sym("rdma_user_mmap_io", "ib_core")],
        entry: &[
            f("vm_start", Param("vma"), "vm_start", Hex),
            f("pfn", Param("pfn"), "", Hex),
            f("size", Param("size"), "", Dec),
            f("prot", Param("prot"), "", PgProt),
        ],
        ret: &RET_CODE,
        stack: true,
        hardware_only: true,
        about: "remaps device (BAR) pages into user space: doorbells become plain MMIO stores",
    },
    ProbeSpec {
        id: ProbeId::CompHandler,
        path: Path::Completion,
        kind: Kind::Kprobe,
        symbols: &[sym("ib_uverbs_comp_handler", "ib_uverbs")],
        entry: &[
            f("cq", Param("cq"), "", Hex),
            f("cq_user_handle", Param("cq"), "uobject->uevent.uobject.user_handle", Hex),
            f("cqe", Param("cq"), "cqe", Dec),
        ],
        ret: &[],
        stack: true,
        hardware_only: false,
        about: "a completion on an armed CQ: queues an event on its completion channel and wakes the reader",
    },
    ProbeSpec {
        id: ProbeId::RxeCreateCq,
        path: Path::Completion,
        kind: Kind::Kprobe,
        symbols: &[sym("rxe_create_cq", "rdma_rxe")],
        entry: &CREATE_CQ_ENTRY,
        ret: &RET_CODE,
        stack: true,
        hardware_only: false,
        about: "soft-RoCE creates a CQ: the kernel CQ and the user handle its completions will carry",
    },
    ProbeSpec {
        id: ProbeId::Mlx5CreateCq,
        path: Path::Completion,
        kind: Kind::Kprobe,
        symbols: &[sym("mlx5_ib_create_cq", "mlx5_ib")],
        entry: &CREATE_CQ_ENTRY,
        ret: &RET_CODE,
        stack: true,
        hardware_only: true,
        about: "ConnectX creates a CQ (its EQ/interrupt vector comes from comp_vector)",
    },
    ProbeSpec {
        id: ProbeId::CompEventRead,
        path: Path::Completion,
        kind: Kind::Kprobe,
        symbols: &[sym("ib_uverbs_comp_event_read", "ib_uverbs")],
        entry: &[f("count", Param("count"), "", Dec)],
        ret: &[f("ret", Ret, "", Errno)],
        stack: false,
        hardware_only: false,
        about: "the workload reads its completion channel (ibv_get_cq_event): the wakeup side of a completion event",
    },
    ProbeSpec {
        id: ProbeId::ModifyQp,
        path: Path::Completion,
        kind: Kind::Kprobe,
        symbols: &[sym("ib_modify_qp_with_udata", "ib_core")],
        entry: &[
            f("qp_num", Param("ib_qp"), "qp_num", Hex),
            f("qp_state", Param("attr"), "qp_state", QpState),
            f("attr_mask", Param("attr_mask"), "", Hex),
            f("dest_qp_num", Param("attr"), "dest_qp_num", Hex),
            f("dgid_prefix", Param("attr"), "ah_attr.grh.dgid.global.subnet_prefix", GidHalf),
            f("dgid_iid", Param("attr"), "ah_attr.grh.dgid.global.interface_id", GidHalf),
            f("send_cq", Param("ib_qp"), "send_cq", Hex),
            f("recv_cq", Param("ib_qp"), "recv_cq", Hex),
        ],
        ret: &[f("ret", Ret, "", Errno)],
        stack: false,
        hardware_only: false,
        about: "the application moves a QP to its next state (ibv_modify_qp); at RTR it names its peer: the remote QP number and GID, what joins both ends of a connection",
    },
    ProbeSpec {
        id: ProbeId::RxePostSend,
        path: Path::Completion,
        kind: Kind::Kprobe,
        symbols: &[sym("rxe_post_send", "rdma_rxe")],
        entry: &[
            f("qp_num", Param("ibqp"), "qp_num", Hex),
            f("send_cq", Param("ibqp"), "send_cq", Hex),
            f("recv_cq", Param("ibqp"), "recv_cq", Hex),
        ],
        ret: &[f("ret", Ret, "", Errno)],
        stack: false,
        hardware_only: false,
        about: "soft-RoCE's doorbell: ibv_post_send wrote its work requests into the mapped send queue and asks the kernel (a write(2) of a post_send command) to process them; on a ConnectX NIC the doorbell is an MMIO store and no kernel function runs",
    },
    ProbeSpec {
        id: ProbeId::UmemRelease,
        path: Path::Teardown,
        kind: Kind::Kprobe,
        symbols: &[sym("ib_umem_release", "ib_uverbs"), sym("ib_umem_release", "ib_core")],
        entry: &[
            f("umem", Param("umem"), "", Hex),
            f("umem_address", Param("umem"), "address", Hex),
            f("umem_length", Param("umem"), "length", Dec),
        ],
        ret: &[],
        stack: true,
        hardware_only: false,
        about: "unpins a memory region's pages (MR deregistration)",
    },
    ProbeSpec {
        id: ProbeId::MrDereg,
        path: Path::Teardown,
        kind: Kind::Tracepoint { category: "rdma_core" },
        symbols: &[sym("mr_dereg", "ib_core")],
        entry: &[f("mr_id", TpField("id"), "", Dec)],
        ret: &[],
        stack: true,
        hardware_only: false,
        about: "the rdma_core:mr_dereg tracepoint: an MR is deregistered (restrack id = `rdma res` mrn)",
    },
    ProbeSpec {
        id: ProbeId::IbvOpenDevice,
        path: Path::Verbs,
        kind: IBV,
        symbols: &[sym("ibv_open_device", LIBIBVERBS)],
        entry: &[],
        ret: &[f("context", UserRet, "", Hex)],
        stack: false,
        hardware_only: false,
        about: "the application opens the device: the uverbs fd, and on hardware the UAR/doorbell mmaps",
    },
    ProbeSpec {
        id: ProbeId::IbvRegMr,
        path: Path::Verbs,
        kind: IBV,
        symbols: &[sym("ibv_reg_mr", LIBIBVERBS)],
        entry: &[
            f("addr", UserArg(1), "", Hex),
            f("length", UserArg(2), "", Dec),
            f("access", UserArg(3), "", Access),
        ],
        ret: &IBV_MR_RET,
        stack: false,
        hardware_only: false,
        about: "the application registers memory (libibverbs ibv_reg_mr)",
    },
    ProbeSpec {
        id: ProbeId::IbvRegMrIova2,
        path: Path::Verbs,
        kind: IBV,
        symbols: &[sym("ibv_reg_mr_iova2", LIBIBVERBS)],
        entry: &[
            f("addr", UserArg(1), "", Hex),
            f("length", UserArg(2), "", Dec),
            f("iova", UserArg(3), "", Hex),
            f("access", UserArg(4), "", Access),
        ],
        ret: &IBV_MR_RET,
        stack: false,
        hardware_only: false,
        about: "memory registration with an explicit IO virtual address (ibv_reg_mr calls it too)",
    },
    ProbeSpec {
        id: ProbeId::IbvDeregMr,
        path: Path::Verbs,
        kind: IBV,
        symbols: &[sym("ibv_dereg_mr", LIBIBVERBS)],
        entry: &[
            f("mr", UserArg(0), "", Hex),
            f("addr", UserArg(0), "ibv_mr.addr", Hex),
            f("length", UserArg(0), "ibv_mr.length", Dec),
            f("lkey", UserArg(0), "ibv_mr.lkey", Hex),
        ],
        ret: &[f("ret", UserRet, "", Errno)],
        stack: false,
        hardware_only: false,
        about: "the application deregisters an MR (unpins its pages)",
    },
    ProbeSpec {
        id: ProbeId::IbvCreateCompChannel,
        path: Path::Verbs,
        kind: IBV,
        symbols: &[sym("ibv_create_comp_channel", LIBIBVERBS)],
        entry: &[],
        ret: &[f("channel", UserRet, "", Hex), f("fd", UserRet, "ibv_comp_channel.fd", Dec)],
        stack: false,
        hardware_only: false,
        about: "a completion channel: the fd ibv_get_cq_event reads completion events from",
    },
    ProbeSpec {
        id: ProbeId::IbvCreateCq,
        path: Path::Verbs,
        kind: IBV,
        symbols: &[sym("ibv_create_cq", LIBIBVERBS)],
        entry: &[f("cqe", UserArg(1), "", Dec), f("channel", UserArg(3), "", Hex)],
        ret: &[f("cq", UserRet, "", Hex), f("cq_cqe", UserRet, "ibv_cq.cqe", Dec)],
        stack: false,
        hardware_only: false,
        about: "a CQ: its `struct ibv_cq *` is the user handle the kernel hands back with completion events",
    },
    ProbeSpec {
        id: ProbeId::IbvCreateQp,
        path: Path::Verbs,
        kind: IBV,
        symbols: &[sym("ibv_create_qp", LIBIBVERBS)],
        entry: &[],
        ret: &[f("qp", UserRet, "", Hex), f("qp_num", UserRet, "ibv_qp.qp_num", Hex)],
        stack: false,
        hardware_only: false,
        about: "a QP: its send/receive queues are mapped into the process (mmap path)",
    },
    ProbeSpec {
        id: ProbeId::IbvGetCqEvent,
        path: Path::Verbs,
        kind: IBV,
        symbols: &[sym("ibv_get_cq_event", LIBIBVERBS)],
        entry: &[f("channel", UserArg(0), "", Hex), f("fd", UserArg(0), "ibv_comp_channel.fd", Dec)],
        ret: &[f("ret", UserRet, "", Errno)],
        stack: false,
        hardware_only: false,
        about: "the application waits for a completion event (a read(2) on the channel fd)",
    },
];

/// Fields of libibverbs' public structs (rdma-core `infiniband/verbs.h`, x86-64 ABI):
/// user space has no BTF, and these layouts are part of the library's stable ABI.
/// `(path, offset, size)`; a user field's `path` names one of these.
pub(crate) const USER_ABI: &[(&str, u32, u8)] = &[
    ("ibv_mr.addr", 16, 8),
    ("ibv_mr.length", 24, 8),
    ("ibv_mr.handle", 32, 4),
    ("ibv_mr.lkey", 36, 4),
    ("ibv_mr.rkey", 40, 4),
    ("ibv_cq.handle", 24, 4),
    ("ibv_cq.cqe", 28, 4),
    ("ibv_qp.handle", 48, 4),
    ("ibv_qp.qp_num", 52, 4),
    ("ibv_comp_channel.fd", 8, 4),
];

pub(crate) fn user_abi(path: &str) -> Option<(u32, u8)> {
    USER_ABI.iter().find(|(p, _, _)| *p == path).map(|(_, o, s)| (*o, *s))
}

const IBV: Kind = Kind::Uprobe { library: "libibverbs.so.1" };
const LIBIBVERBS: &str = "libibverbs.so.1";
const IBV_MR_RET: [Field; 3] = [
    f("mr", UserRet, "", Hex),
    f("lkey", UserRet, "ibv_mr.lkey", Hex),
    f("rkey", UserRet, "ibv_mr.rkey", Hex),
];

pub(crate) fn by_id(id: ProbeId) -> &'static ProbeSpec {
    CATALOG.iter().find(|p| p.id == id).expect("every ProbeId has a catalog entry (tested)")
}

/// The spec of a probe named by its string id (command line, files).
pub(crate) fn by_name(id: &str) -> Option<&'static ProbeSpec> {
    ProbeId::parse(id).map(by_id)
}

/// docs/probes.md, generated from the catalog (a test keeps the file in step).
pub fn markdown() -> String {
    let mut s = String::from(
        "# Probes\n\nGenerated from `rdma-trace/src/plan/catalog.rs` (the single source of truth); \
         `RDMA_TRACE_BLESS=1 cargo test -p rdma-trace --test docs` rewrites it.\n\n\
         Parameters are found by name and fields by path in the running kernel's BTF at load time: \
         `a.b` walks embedded members, `->` follows a pointer. Nothing here is a byte offset.\n",
    );
    for p in CATALOG {
        let kind = match p.kind {
            Kind::Kprobe => "kprobe + kretprobe".to_string(),
            Kind::Tracepoint { category } => format!("tracepoint `{category}`"),
            Kind::Uprobe { library } => format!("uprobe + uretprobe in `{library}` (default symbol version)"),
        };
        let syms: Vec<String> = p.symbols.iter().map(|s| format!("`{}` ({})", s.name, s.module)).collect();
        s.push_str(&format!("\n## `{}` — {:?} path\n\n{}.\n\n", p.id, p.path, p.about));
        s.push_str(&format!("- attach: {kind} on the first present of {}\n", syms.join(", ")));
        if p.hardware_only {
            s.push_str("- fires only with a hardware NIC: attached and verified in the soft-RoCE lab, never observed there\n");
        }
        if p.stack {
            s.push_str("- kernel stack captured at entry\n");
        }
        let show = |fields: &[Field]| -> String {
            fields
                .iter()
                .map(|f| {
                    let src = match f.from {
                        Src::Param(n) => format!("param `{n}`"),
                        Src::Ret => "return value".into(),
                        Src::Task => "the current task".into(),
                        Src::TpField(n) => format!("record field `{n}`"),
                        Src::UserArg(n) => format!("argument {n}"),
                        Src::UserRet => "return value".into(),
                    };
                    let path = if f.path.is_empty() { String::new() } else { format!(" → `{}`", f.path) };
                    format!("  - `{}`: {src}{path} ({:?})\n", f.name(), f.render)
                })
                .collect()
        };
        if !p.entry.is_empty() {
            s.push_str(&format!("- at entry:\n{}", show(p.entry)));
        }
        if !p.ret.is_empty() {
            s.push_str(&format!("- at return:\n{}", show(p.ret)));
        }
    }
    s.push_str(&super::mlx5::markdown());
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_fit_the_slots() {
        let mut ids: Vec<_> = CATALOG.iter().map(|p| p.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), CATALOG.len());
        assert_eq!(ids, ProbeId::ALL, "one catalog entry per ProbeId, in the same order");
        for id in ProbeId::ALL {
            assert_eq!(ProbeId::parse(id.as_str()), Some(*id));
        }
        let user = CATALOG.iter().filter(|p| matches!(p.kind, Kind::Uprobe { .. })).count();
        assert!(CATALOG.len() - user <= rdma_trace_common::MAX_SLOTS);
        assert!(user <= rdma_trace_common::MAX_USER_SLOTS);
        for p in CATALOG {
            for f in p.entry.iter().chain(p.ret) {
                if matches!(f.from, Src::UserArg(_) | Src::UserRet) && !f.path.is_empty() {
                    assert!(user_abi(f.path).is_some(), "{}: no ABI entry for {}", p.id, f.path);
                }
            }
        }
        for p in CATALOG {
            assert!(p.entry.len() <= rdma_trace_common::MAX_FETCH, "{}", p.id);
            assert!(p.ret.len() <= rdma_trace_common::MAX_FETCH, "{}", p.id);
            assert!(!p.symbols.is_empty(), "{}", p.id);
        }
    }
}
