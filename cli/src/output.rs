//! What fencedlock itself prints: results on stdout, notices and errors on stderr, as text or
//! (with `--json`) one JSON object per line.

use std::io::Write;

use serde_json::{json, Value};

use crate::error::CliError;

/// Where and how to print, from `--json` and `-q`.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    /// `--json`.
    pub json: bool,
    /// `-q`: no notices.
    pub quiet: bool,
}

impl Output {
    /// A result on stdout: `text` normally, `value` with `--json`.
    pub fn result(&self, text: &str, value: Value) {
        let mut out = std::io::stdout().lock();
        let _ = if self.json { writeln!(out, "{value}") } else { writeln!(out, "{text}") };
        let _ = out.flush();
    }

    /// A line of a stream of results on stdout (`leader --watch`); `false` once stdout is
    /// closed (`| head`), which ends the stream.
    pub fn stream(&self, text: &str, value: Value) -> bool {
        let mut out = std::io::stdout().lock();
        let written = if self.json { writeln!(out, "{value}") } else { writeln!(out, "{text}") };
        written.and_then(|()| out.flush()).is_ok()
    }

    /// A record on stderr (used by `run`, whose stdout belongs to the command).
    pub fn record(&self, text: Option<&str>, value: Value) {
        if self.json {
            stderr(&value.to_string());
        } else if let Some(text) = text {
            self.notice(text);
        }
    }

    /// A one-line notice on stderr, unless `-q` (or `--json`, which prints records instead).
    pub fn notice(&self, text: &str) {
        if !self.quiet && !self.json {
            stderr(&format!("fencedlock: {text}"));
        }
    }

    /// A warning on stderr: shown even with `-q`, since it means something went wrong.
    pub fn warning(&self, text: &str) {
        if self.json {
            stderr(&json!({ "warning": text }).to_string());
        } else {
            stderr(&format!("fencedlock: warning: {text}"));
        }
    }

    /// The error that ends the process, as one line on stderr.
    pub fn error(&self, err: &CliError) {
        if self.json {
            stderr(
                &json!({ "error": err.kind(), "message": err.one_line(), "exit_code": err.exit_code() })
                    .to_string(),
            );
        } else {
            stderr(&format!("fencedlock: error: {}", err.one_line()));
        }
    }
}

/// One line on stderr. A stderr that is gone (a `hold` whose shell exited, a closed pipe) loses
/// the line rather than panicking as `eprintln!` would, so the exit code stays fencedlock's.
fn stderr(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}
