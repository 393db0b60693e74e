//! The uprobe hook: `rdma_trace_step(rec, len)` is called with each step record's JSON
//! bytes (no newline) right after the step ends. It does nothing; a tracer that attaches a
//! uprobe to the symbol in the `rdma-trace-workload` binary reads the record from user
//! memory at the moment the step is announced, without waiting for the file.

/// Called once per announced step. `rec` points at `len` bytes of UTF-8 JSON, valid only
/// for the duration of the call.
#[unsafe(no_mangle)]
#[inline(never)]
pub(crate) extern "C" fn rdma_trace_step(rec: *const u8, len: usize) {
    // An empty asm block that "uses" both arguments: the compiler must keep the call and the
    // argument registers as they are, and it cannot see that nothing happens.
    // SAFETY: the block has no instructions; it reads the two registers and touches no memory.
    unsafe {
        std::arch::asm!(
            "/* rdma_trace_step {0} {1} */",
            in(reg) rec,
            in(reg) len,
            options(nostack, preserves_flags, readonly)
        );
    }
}

/// Announces `json` through the hook.
pub(crate) fn call(json: &[u8]) {
    rdma_trace_step(json.as_ptr(), json.len());
}
