//! Kernel functions of the RDMA paths in RDMA terms: what a stack frame means and the
//! source file it lives in (Linux 6.12 and 7.3 alike unless said). One table, used to
//! annotate stacks on screen (the TUI's event detail), by `explain` and by the guides.

/// A kernel function on a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Frame {
    pub function: &'static str,
    /// Its source file in the kernel tree.
    pub file: &'static str,
    /// What it does on the path.
    pub what: &'static str,
}

const fn f(function: &'static str, file: &'static str, what: &'static str) -> Frame {
    Frame { function, file, what }
}

pub(crate) const FRAMES: &[Frame] = &[
    f("__x64_sys_ioctl", "fs/ioctl.c", "the ioctl(2) system call"),
    f(
        "ib_uverbs_ioctl",
        "drivers/infiniband/core/uverbs_ioctl.c",
        "a libibverbs command enters the kernel (uverbs ioctl)",
    ),
    f(
        "ib_uverbs_cmd_verbs",
        "drivers/infiniband/core/uverbs_ioctl.c",
        "uverbs finds the command's method and runs its handler",
    ),
    f(
        "ib_uverbs_run_method",
        "drivers/infiniband/core/uverbs_ioctl.c",
        "uverbs dispatches the command to its method",
    ),
    f(
        "ib_uverbs_handler_UVERBS_METHOD_INVOKE_WRITE",
        "drivers/infiniband/core/uverbs_std_types_device.c",
        "a write-style command carried inside an ioctl (INVOKE_WRITE)",
    ),
    f(
        "ib_uverbs_reg_mr",
        "drivers/infiniband/core/uverbs_cmd.c",
        "the REG_MR command: asks the provider to register",
    ),
    f(
        "ib_uverbs_write",
        "drivers/infiniband/core/uverbs_main.c",
        "a uverbs command written to the fd (write(2))",
    ),
    f("rxe_reg_user_mr", "drivers/infiniband/sw/rxe/rxe_verbs.c", "soft-RoCE registers the MR"),
    f(
        "rxe_post_send",
        "drivers/infiniband/sw/rxe/rxe_verbs.c",
        "soft-RoCE's doorbell: the posted send WQEs are taken and its requester sends them",
    ),
    f(
        "mlx5_ib_reg_user_mr",
        "drivers/infiniband/hw/mlx5/mr.c",
        "mlx5 registers the MR (builds the NIC's translation)",
    ),
    f("rxe_mr_init_user", "drivers/infiniband/sw/rxe/rxe_mr.c", "soft-RoCE pins and maps the MR's pages"),
    f("ib_umem_get", "drivers/infiniband/core/umem.c", "pins the user pages (charged to RLIMIT_MEMLOCK)"),
    f(
        "__ib_umem_get_va",
        "drivers/infiniband/core/umem.c",
        "pins the user pages (charged to RLIMIT_MEMLOCK)",
    ),
    f(
        "ib_umem_get_attr_or_va",
        "drivers/infiniband/core/umem.c",
        "chooses a dma-buf or a user-memory umem: user memory here",
    ),
    f("pin_user_pages_fast", "mm/gup.c", "the mm pins the pages (FOLL_LONGTERM)"),
    f(
        "ib_umem_release",
        "drivers/infiniband/core/umem.c",
        "unpins the pages and gives the memlock charge back",
    ),
    f("ib_dereg_mr_user", "drivers/infiniband/core/verbs.c", "deregisters the MR"),
    f(
        "ib_uverbs_mmap",
        "drivers/infiniband/core/uverbs_main.c",
        "mmap(2) on the uverbs fd: doorbell/UAR or queue pages",
    ),
    f(
        "rdma_user_mmap_io",
        "drivers/infiniband/core/ib_core_uverbs.c",
        "maps device memory (doorbell, UAR) into the process",
    ),
    f("rxe_mmap", "drivers/infiniband/sw/rxe/rxe_mmap.c", "soft-RoCE maps a queue buffer into the process"),
    f(
        "rxe_create_mmap_info",
        "drivers/infiniband/sw/rxe/rxe_mmap.c",
        "soft-RoCE gives a queue buffer the key the program will mmap",
    ),
    f(
        "do_mmap_info",
        "drivers/infiniband/sw/rxe/rxe_queue.c",
        "makes a queue's key and writes it into the reply",
    ),
    f("rxe_cq_from_init", "drivers/infiniband/sw/rxe/rxe_cq.c", "soft-RoCE sets up a CQ's ring"),
    f(
        "rxe_qp_from_init",
        "drivers/infiniband/sw/rxe/rxe_qp.c",
        "soft-RoCE sets up a QP's send and receive queues",
    ),
    f(
        "mlx5_ib_mmap",
        "drivers/infiniband/hw/mlx5/main.c",
        "mlx5 decodes the offset: UAR, BlueFlame, clock, device memory",
    ),
    f(
        "ib_uverbs_comp_handler",
        "drivers/infiniband/core/uverbs_main.c",
        "queues a completion event on the completion channel",
    ),
    f(
        "rxe_cq_post",
        "drivers/infiniband/sw/rxe/rxe_cq.c",
        "soft-RoCE posts a CQE and calls the CQ's handler",
    ),
    f(
        "rxe_completer",
        "drivers/infiniband/sw/rxe/rxe_comp.c",
        "soft-RoCE's completer (the software NIC's requester side)",
    ),
    f("do_complete", "drivers/infiniband/sw/rxe/rxe_comp.c", "soft-RoCE completes a work request"),
    f("rxe_responder", "drivers/infiniband/sw/rxe/rxe_resp.c", "soft-RoCE's responder (older kernels' name)"),
    f("rxe_receiver", "drivers/infiniband/sw/rxe/rxe_resp.c", "soft-RoCE's responder (the software NIC)"),
    f("rxe_sender", "drivers/infiniband/sw/rxe/rxe_req.c", "soft-RoCE's requester task"),
    f("do_task", "drivers/infiniband/sw/rxe/rxe_task.c", "soft-RoCE's task, run in a kworker (6.12)"),
    f("do_work", "drivers/infiniband/sw/rxe/rxe_task.c", "soft-RoCE's task, run in a kworker (7.x)"),
    f("process_one_work", "kernel/workqueue.c", "a kworker runs queued work"),
    f(
        "rxe_do_task",
        "drivers/infiniband/sw/rxe/rxe_task.c",
        "soft-RoCE's task, run inline or as a tasklet (6.1)",
    ),
    f("rxe_requester", "drivers/infiniband/sw/rxe/rxe_req.c", "soft-RoCE's requester (older kernels' name)"),
    f(
        "rxe_xmit_packet",
        "drivers/infiniband/sw/rxe/rxe_net.c",
        "soft-RoCE puts a packet on the wire (here: loops it back)",
    ),
    f("ib_uverbs_post_send", "drivers/infiniband/core/uverbs_cmd.c", "the POST_SEND command"),
    f(
        "handle_softirqs",
        "kernel/softirq.c",
        "softirq processing: runs the pending softirqs, tasklets among them",
    ),
    f(
        "__local_bh_enable_ip",
        "kernel/softirq.c",
        "bottom halves re-enabled: pending softirqs run here, in this thread",
    ),
    f("mlx5_ib_cq_comp", "drivers/infiniband/hw/mlx5/cq.c", "mlx5's completion callback for the CQ"),
    f(
        "mlx5_cq_tasklet_cb",
        "drivers/net/ethernet/mellanox/mlx5/core/cq.c",
        "mlx5's completion tasklet (softirq)",
    ),
    f(
        "mlx5_eq_comp_int",
        "drivers/net/ethernet/mellanox/mlx5/core/eq.c",
        "the NIC's completion interrupt (event queue)",
    ),
    f(
        "ib_uverbs_comp_event_read",
        "drivers/infiniband/core/uverbs_main.c",
        "the program's read(2) on the completion channel",
    ),
    f("ib_uverbs_create_cq", "drivers/infiniband/core/uverbs_cmd.c", "the CREATE_CQ command"),
    f(
        "ib_uverbs_handler_UVERBS_METHOD_CQ_CREATE",
        "drivers/infiniband/core/uverbs_std_types_cq.c",
        "the CQ_CREATE method",
    ),
    f("rxe_create_cq", "drivers/infiniband/sw/rxe/rxe_verbs.c", "soft-RoCE creates the CQ"),
    f("mlx5_ib_create_cq", "drivers/infiniband/hw/mlx5/cq.c", "mlx5 creates the CQ"),
];

/// The function of a stack frame (`function+0xoff [module]`).
pub fn function(frame: &str) -> &str {
    frame.split(['+', ' ']).next().unwrap_or(frame)
}

/// The table's entry for a frame or function name, if it is on a path.
pub(crate) fn lookup(frame: &str) -> Option<&'static Frame> {
    let func = function(frame);
    FRAMES.iter().find(|f| f.function == func)
}

/// What a frame (`function+0xoff [module]`) means, if it is on a path.
pub(crate) fn frame(frame: &str) -> Option<&'static str> {
    lookup(frame).map(|f| f.what)
}

#[cfg(test)]
mod tests {
    #[test]
    fn frames_from_lab_stacks() {
        assert_eq!(
            super::frame("ib_umem_get+0x5 [ib_uverbs]"),
            Some("pins the user pages (charged to RLIMIT_MEMLOCK)")
        );
        assert_eq!(
            super::lookup("rxe_mmap+0x10 [rdma_rxe]").map(|f| f.file),
            Some("drivers/infiniband/sw/rxe/rxe_mmap.c")
        );
        assert_eq!(super::frame("ret_from_fork+0x2bc"), None);
    }
}
