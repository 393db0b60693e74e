//! Starting the traced command so that its syscalls are watched from its first one.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;

/// Why the traced command could not be started.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SpawnError {
    #[error("pipe: {0}")]
    Pipe(io::Error),
    #[error("creating {}: {error}", path.display())]
    Log { path: PathBuf, error: io::Error },
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("cannot start {command}: {error}")]
    Start { command: String, error: io::Error },
}

/// Why `--user` names no user to run the command as.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UserError {
    #[error("a user name: {0}")]
    BadName(std::ffi::NulError),
    #[error("--user {0}: no such user")]
    NoSuchUser(String),
}

/// A pipe, both ends close-on-exec: (read, write).
pub(crate) fn cloexec_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2(2) writes two descriptors into the array given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just created and belong to nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Starts `cmd` held at a barrier so its syscalls are watched from its first one.
/// A tiny shell waits on a pipe (fd 3) and then execs the command, keeping the pid;
/// writing to (or closing) the returned pipe end releases it.
pub(crate) fn spawn_held(
    cmd: &[String],
    log: Option<&std::path::Path>,
    run_as: Option<&RunAs>,
) -> Result<(std::process::Child, std::fs::File), SpawnError> {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let (r, w) = cloexec_pipe().map_err(SpawnError::Pipe)?;
    let w = std::fs::File::from(w);
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
            .map_err(|error| SpawnError::Log { path: log.to_path_buf(), error })?;
        c.stdin(std::process::Stdio::null()).stdout(f.try_clone()?).stderr(f);
    }
    // Looked up before the fork: only async-signal-safe calls run in the child.
    let creds = run_as.map(|r| (r.uid, r.gid, r.groups()));
    // SAFETY: dup2, setgroups, setgid and setuid are async-signal-safe; the first gives
    // the child the read end as fd 3 (without O_CLOEXEC), the others drop to the user
    // (groups first, the uid last: after it nothing else may be dropped).
    unsafe {
        c.pre_exec(move || {
            if libc::dup2(rfd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some((uid, gid, groups)) = &creds
                && (libc::setgroups(groups.len(), groups.as_ptr()) != 0
                    || libc::setgid(*gid) != 0
                    || libc::setuid(*uid) != 0)
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = c.spawn().map_err(|error| SpawnError::Start { command: cmd[0].clone(), error })?;
    drop(r);
    Ok((child, w))
}

/// Whom the traced command runs as: a user other than root, with its primary group and
/// the groups it is a member of. Root has CAP_IPC_LOCK, so a command run as root is never
/// held to RLIMIT_MEMLOCK: the refusals this tool explains could not happen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RunAs {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

impl RunAs {
    /// `--user` (a name or a uid; root or 0 keeps root), else, under sudo, the user who ran
    /// it (SUDO_UID, SUDO_GID, SUDO_USER), else none: the command runs as this process.
    pub(crate) fn choose(user: Option<&str>) -> Result<Option<RunAs>, UserError> {
        if let Some(u) = user {
            let r = Self::lookup(u)?;
            return Ok((r.uid != 0).then_some(r));
        }
        // SAFETY: geteuid(2) cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Ok(None);
        }
        let var = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u32>().ok());
        let (Some(uid), Some(gid)) = (var("SUDO_UID"), var("SUDO_GID")) else { return Ok(None) };
        if uid == 0 {
            return Ok(None);
        }
        let name = match std::env::var("SUDO_USER") {
            Ok(n) if !n.is_empty() => n,
            _ => Self::lookup(&uid.to_string())?.name,
        };
        Ok(Some(RunAs { name, uid, gid }))
    }

    /// A user by name, or by number.
    fn lookup(user: &str) -> Result<RunAs, UserError> {
        // SAFETY: passwd is plain data (integers and pointers): all zeroes is a valid value.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut buf = vec![0 as libc::c_char; 16 * 1024];
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        let rc = match user.parse::<u32>() {
            // SAFETY: getpwuid_r(3) into a passwd and a buffer of the size given.
            Ok(uid) => unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) },
            Err(_) => {
                let name = std::ffi::CString::new(user).map_err(UserError::BadName)?;
                // SAFETY: getpwnam_r(3) into a passwd and a buffer of the size given.
                unsafe { libc::getpwnam_r(name.as_ptr(), &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) }
            }
        };
        if rc != 0 || found.is_null() {
            return Err(UserError::NoSuchUser(user.to_string()));
        }
        // SAFETY: getpw*_r succeeded: pw_name points into `buf`, NUL-terminated.
        let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) }.to_string_lossy().into_owned();
        Ok(RunAs { name, uid: pwd.pw_uid, gid: pwd.pw_gid })
    }

    /// The groups the user is a member of (its primary group among them).
    fn groups(&self) -> Vec<libc::gid_t> {
        let Ok(name) = std::ffi::CString::new(self.name.as_str()) else { return vec![self.gid] };
        let mut n: libc::c_int = 32;
        loop {
            let mut groups = vec![0 as libc::gid_t; n as usize];
            let want = n;
            // SAFETY: getgrouplist(3) writes at most `n` groups and says how many there are.
            let rc = unsafe { libc::getgrouplist(name.as_ptr(), self.gid, groups.as_mut_ptr(), &mut n) };
            if rc >= 0 {
                groups.truncate(n as usize);
                return groups;
            }
            if n <= want {
                return vec![self.gid];
            }
        }
    }
}
