//! Starting the traced command so that its syscalls are watched from its first one.

use anyhow::{Context, Result, bail};

/// Starts `cmd` held at a barrier so its syscalls are watched from its first one.
/// A tiny shell waits on a pipe (fd 3) and then execs the command, keeping the pid;
/// writing to (or closing) the returned pipe end releases it.
pub fn spawn_held(
    cmd: &[String],
    log: Option<&std::path::Path>,
) -> Result<(std::process::Child, std::fs::File)> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::process::CommandExt;
    let mut fds = [0i32; 2];
    // SAFETY: pipe2(2) with a valid two-int array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        bail!("pipe: {}", std::io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and are owned by nobody else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), std::fs::File::from_raw_fd(fds[1])) };
    let rfd = r.as_raw_fd();
    let mut c = std::process::Command::new("/bin/sh");
    c.arg("-c").arg("read _ <&3; exec 3<&-; exec \"$0\" \"$@\"").args(cmd);
    if let Some(log) = log {
        use std::os::unix::fs::OpenOptionsExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(log)
            .with_context(|| format!("creating {}", log.display()))?;
        c.stdin(std::process::Stdio::null()).stdout(f.try_clone()?).stderr(f);
    }
    // SAFETY: dup2 is async-signal-safe; it gives the child the read end as fd 3
    // (without O_CLOEXEC).
    unsafe {
        c.pre_exec(move || {
            if libc::dup2(rfd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = c.spawn().with_context(|| format!("cannot start {}", cmd[0]))?;
    drop(r);
    Ok((child, w))
}
