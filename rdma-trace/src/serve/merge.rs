//! Several daemons' streams as one (`tui --connect A --connect B`, `trace --connect`): each
//! source is read on its own thread and its records handed on tagged with its index, in the
//! order they arrive. `pipeline::merge::Merge` places them, as it places files.

use crate::capture::Record;
use crate::source::capture::Reader;
use std::sync::mpsc::Sender;

/// What a source's thread hands on.
pub(crate) enum Tagged {
    Record(usize, Record),
    /// The source's stream ended (why).
    Ended(usize, String),
}

/// Reads source `i` to its end on a thread of its own.
pub(crate) fn spawn(i: usize, mut reader: Reader<Box<dyn std::io::BufRead + Send>>, tx: Sender<Tagged>) {
    std::thread::spawn(move || {
        for rec in reader.by_ref() {
            match rec {
                Ok(r) => {
                    if tx.send(Tagged::Record(i, r)).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    tx.send(Tagged::Ended(i, format!("{e:#}"))).ok();
                    return;
                }
            }
        }
        let notes = reader.report.notes();
        let why = if notes.is_empty() { "its stream ended".to_string() } else { notes.join("; ") };
        tx.send(Tagged::Ended(i, why)).ok();
    });
}
