//! The companion's signals: SIGINT/SIGTERM finish the current run and stop (a second one
//! exits at once); SIGALRM ends a run that took longer than `--timeout-s`.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Set by SIGINT/SIGTERM: finish the current run, then stop.
pub(crate) static STOP: AtomicBool = AtomicBool::new(false);
/// SIGINT/SIGTERM received; the second one exits at once.
static SIGNALS: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_stop(_sig: libc::c_int) {
    if SIGNALS.fetch_add(1, Ordering::SeqCst) >= 1 {
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(130) };
    }
    STOP.store(true, Ordering::SeqCst);
}

extern "C" fn on_alarm(_sig: libc::c_int) {
    let msg = b"rdma-trace-workload: error: a run took longer than --timeout-s (a completion or event never came?)\n";
    // SAFETY: write and _exit are async-signal-safe; msg is a static buffer.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::_exit(1);
    }
}

pub(crate) fn install_handlers() {
    // SAFETY: the handlers only touch atomics or call async-signal-safe functions.
    unsafe {
        libc::signal(libc::SIGINT, on_stop as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_stop as *const () as libc::sighandler_t);
        libc::signal(libc::SIGALRM, on_alarm as *const () as libc::sighandler_t);
    }
}
