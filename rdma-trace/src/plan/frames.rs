//! Kernel functions of the RDMA paths in RDMA terms: what a stack frame means. One table,
//! used to annotate stacks on screen (the TUI's event detail) and for teaching.

/// (function, what it does on the path).
pub const FRAMES: &[(&str, &str)] = &[
    ("ib_uverbs_ioctl", "a libibverbs command enters the kernel (uverbs ioctl)"),
    ("ib_uverbs_run_method", "uverbs dispatches the command to its method"),
    ("ib_uverbs_handler_UVERBS_METHOD_REG_MR", "the REG_MR method"),
    ("ib_uverbs_reg_mr", "the REG_MR command (write path)"),
    ("ib_uverbs_write", "a legacy uverbs command written to the fd"),
    ("rxe_reg_user_mr", "soft-RoCE registers the MR"),
    ("mlx5_ib_reg_user_mr", "mlx5 registers the MR (builds the NIC's translation)"),
    ("rxe_mr_init_user", "soft-RoCE maps the MR's pages"),
    ("ib_umem_get", "pins the user pages (charged to RLIMIT_MEMLOCK)"),
    ("__ib_umem_get_va", "pins the user pages (charged to RLIMIT_MEMLOCK)"),
    ("pin_user_pages_fast", "the mm pins the pages (FOLL_LONGTERM)"),
    ("ib_umem_release", "unpins the pages"),
    ("ib_dereg_mr_user", "deregisters the MR"),
    ("ib_uverbs_mmap", "mmap(2) on the uverbs fd: doorbell/UAR or queue pages"),
    ("rdma_user_mmap_io", "maps device memory (doorbell, UAR) into the process"),
    ("rxe_mmap", "soft-RoCE maps a queue buffer into the process"),
    ("mlx5_ib_mmap", "mlx5 decodes the offset: UAR, BlueFlame, clock, device memory"),
    ("ib_uverbs_comp_handler", "queues a completion event on the completion channel"),
    ("rxe_cq_post", "soft-RoCE posts a CQE and calls the CQ's handler"),
    ("rxe_completer", "soft-RoCE's completer (the software NIC)"),
    ("rxe_responder", "soft-RoCE's responder (the software NIC)"),
    ("do_task", "soft-RoCE's task, run in a kworker"),
    ("process_one_work", "a kworker runs queued work"),
    ("mlx5_ib_cq_comp", "mlx5's completion callback for the CQ"),
    ("mlx5_eq_comp_int", "the NIC's completion interrupt (event queue)"),
    ("ib_uverbs_comp_event_read", "the program's read(2) on the completion channel"),
    ("ib_uverbs_create_cq", "the CREATE_CQ command"),
    ("rxe_create_cq", "soft-RoCE creates the CQ"),
    ("mlx5_ib_create_cq", "mlx5 creates the CQ"),
];

/// What a frame (`function+0xoff [module]`) means, if it is on a path.
pub fn frame(frame: &str) -> Option<&'static str> {
    let func = frame.split(['+', ' ']).next()?;
    FRAMES.iter().find(|(f, _)| *f == func).map(|(_, what)| *what)
}

#[cfg(test)]
mod tests {
    #[test]
    fn frames_from_lab_stacks() {
        assert_eq!(
            super::frame("ib_umem_get+0x5 [ib_uverbs]"),
            Some("pins the user pages (charged to RLIMIT_MEMLOCK)")
        );
        assert_eq!(super::frame("ret_from_fork+0x2bc"), None);
    }
}
