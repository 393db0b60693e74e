//! Turning a step's outcome into its record: success gets the next record to fill in,
//! failure is announced (ok=false, errno, message), flushed, and returned as an error.

use super::announce::Announcer;
use crate::steps::{StepName, StepRecord};
use anyhow::Error;
use std::io;

/// The OS error number somewhere in the error's chain.
pub(crate) fn errno_of(e: &Error) -> Option<i32> {
    // sideway's error kinds are `#[error(transparent)]` over io::Error: the io::Error itself
    // is not in the chain, only its text, so fall back to the "(os error N)" it ends with.
    e.chain()
        .find_map(|c| c.downcast_ref::<io::Error>())
        .and_then(io::Error::raw_os_error)
        .or_else(|| e.chain().find_map(|c| os_error_in(&c.to_string())))
}

fn os_error_in(text: &str) -> Option<i32> {
    let rest = &text[text.rfind("(os error ")? + "(os error ".len()..];
    rest.strip_suffix(')')?.parse().ok()
}

/// `Ok(value, record)` to fill and emit, or the failure announced and returned.
pub(crate) fn done<T, E>(
    ann: &mut Announcer,
    name: StepName,
    t: (u64, u64),
    res: Result<T, E>,
) -> anyhow::Result<(T, StepRecord)>
where
    E: Into<Error>,
{
    match res {
        Ok(v) => Ok((v, ann.next(name, t))),
        Err(e) => {
            let rec = ann.next(name, t);
            Err(fail(ann, rec, e.into()))
        }
    }
}

/// Announces `rec` as failed with `e` and returns the error, naming the step.
pub(crate) fn fail(ann: &mut Announcer, mut rec: StepRecord, e: Error) -> Error {
    rec.ok = false;
    rec.errno = errno_of(&e);
    rec.error = Some(format!("{e:#}"));
    // Already failing: the step's own error is what is returned, not the announcer's.
    ann.emit(&rec).ok();
    ann.flush().ok();
    e.context(format!("step {} ({})", rec.step, rec.name.as_str()))
}

/// An error from a C return code that is itself an errno (ibv_req_notify_cq, ibv_modify_qp…).
pub(crate) fn rc_errno(rc: i32, what: &str) -> anyhow::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::new(io::Error::from_raw_os_error(rc.abs())).context(what.to_string()))
    }
}

/// An error from a C call that returned -1 and set errno.
pub(crate) fn last_errno(what: &str) -> Error {
    Error::new(io::Error::last_os_error()).context(what.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_is_found_under_context() {
        let e = rc_errno(12, "ibv_req_notify_cq").unwrap_err();
        assert_eq!(errno_of(&e), Some(12));
        let e = e.context("step 9 (req_notify_cq)");
        assert_eq!(errno_of(&e), Some(12));
        assert!(format!("{e:#}").contains("ibv_req_notify_cq"));
        assert!(rc_errno(0, "x").is_ok());
        assert_eq!(errno_of(&anyhow::anyhow!("plain")), None);
        let wrapped = anyhow::anyhow!("{}", io::Error::from_raw_os_error(38)).context("outer");
        assert_eq!(errno_of(&wrapped), Some(38));
    }
}
