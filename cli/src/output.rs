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

    /// A record on stderr (used by `run`, whose stdout belongs to the command).
    pub fn record(&self, text: Option<&str>, value: Value) {
        if self.json {
            eprintln!("{value}");
        } else if let Some(text) = text {
            self.notice(text);
        }
    }

    /// A one-line notice on stderr, unless `-q` (or `--json`, which prints records instead).
    pub fn notice(&self, text: &str) {
        if !self.quiet && !self.json {
            eprintln!("fencedlock: {text}");
        }
    }

    /// A warning on stderr: shown even with `-q`, since it means something went wrong.
    pub fn warning(&self, text: &str) {
        if self.json {
            eprintln!("{}", json!({ "warning": text }));
        } else {
            eprintln!("fencedlock: warning: {text}");
        }
    }

    /// The error that ends the process, as one line on stderr.
    pub fn error(&self, err: &CliError) {
        if self.json {
            eprintln!(
                "{}",
                json!({ "error": err.kind(), "message": err.one_line(), "exit_code": err.exit_code() })
            );
        } else {
            eprintln!("fencedlock: error: {}", err.one_line());
        }
    }
}
