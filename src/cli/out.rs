//! Standard output for the commands that print, and how the process ends.
//!
//! `println!` panics when its reader has gone (`berth simulate | head -1`).
//! Every command that prints writes through [`Stdout`] instead, which turns
//! a closed pipe into [`Closed`]; `main` ends such a run quietly with status
//! 141 (128 + SIGPIPE), the status a shell reports for kubectl, `yes` or
//! `cat` in the same place: they die of SIGPIPE, which a Rust program
//! (SIGPIPE ignored by its runtime, and no `unsafe` here to restore it)
//! reports by that exit status instead.

use std::io::{self, Write};

/// The exit status of a command whose standard output was closed by its
/// reader: 128 + SIGPIPE (13), as a shell reports a process killed by it.
pub const CLOSED_STATUS: u8 = 141;

/// Standard output was closed by its reader (EPIPE): nothing more to say.
#[derive(Debug)]
pub struct Closed;

impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("standard output closed by its reader")
    }
}

impl std::error::Error for Closed {}

/// The error for a failed write to standard output: [`Closed`] for a closed
/// pipe, else the I/O error with what was being written.
pub fn stdout_error(e: io::Error) -> anyhow::Error {
    if e.kind() == io::ErrorKind::BrokenPipe {
        anyhow::Error::new(Closed)
    } else {
        anyhow::Error::new(e).context("writing to standard output")
    }
}

/// Whether `e` (or one of its causes) is a closed standard output.
pub fn is_closed(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<Closed>())
}

/// `e`, or [`Closed`] when one of its causes is a broken pipe: for the
/// commands that write to standard output inside the lab (the demo's summary).
pub fn broken_pipe_is_closed(e: anyhow::Error) -> anyhow::Error {
    let closed = e.chain().any(|c| c.downcast_ref::<io::Error>().is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe));
    if closed { anyhow::Error::new(Closed) } else { e }
}

/// Writes `text` and a newline to standard output, flushed.
pub fn print(text: &str) -> anyhow::Result<()> {
    let mut o = io::stdout().lock();
    o.write_all(text.as_bytes()).and_then(|()| if text.ends_with('\n') { Ok(()) } else { o.write_all(b"\n") }).and_then(|()| o.flush()).map_err(stdout_error)
}

/// An error as one line: its message, then each cause that the text so far
/// does not already say (many error types, kube's among them, repeat their
/// source in their own message; printing both says it twice).
pub fn report(e: &anyhow::Error) -> String {
    let mut out = e.to_string();
    for cause in e.chain().skip(1) {
        let s = cause.to_string();
        if !s.is_empty() && !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
    }
    out
}

