//! What the clients accept as a lock key. The server takes any bytes; the clients refuse the
//! keys that are almost always a mistake, before any request: an empty or blank key (a
//! crontab's unset `$JOB` expands to nothing, and every such job would share one lock) and a
//! key with a control character (a stray newline or escape that makes two spellings of one
//! key, and log lines that lie).

use std::fmt;

/// Why a key is refused ([`check`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyProblem {
    /// No bytes at all.
    Empty,
    /// Only whitespace.
    Blank,
    /// A control character (U+0000–U+001F or U+007F–U+009F) at this byte offset.
    Control {
        /// Byte offset of the first one.
        at: usize,
    },
}

impl fmt::Display for KeyProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyProblem::Empty => f.write_str("the lock key is empty (an unset variable expands to nothing)"),
            KeyProblem::Blank => f.write_str("the lock key is only whitespace"),
            KeyProblem::Control { at } => write!(f, "the lock key has a control character at byte {at}"),
        }
    }
}

impl std::error::Error for KeyProblem {}

/// `Ok` for a key the clients send; the problem otherwise.
pub fn check(key: &str) -> Result<(), KeyProblem> {
    if key.is_empty() {
        return Err(KeyProblem::Empty);
    }
    if let Some((at, _)) = key.char_indices().find(|(_, c)| c.is_control()) {
        return Err(KeyProblem::Control { at });
    }
    if key.chars().all(char::is_whitespace) {
        return Err(KeyProblem::Blank);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_blank_and_control_keys_are_refused_and_others_pass() {
        assert_eq!(check(""), Err(KeyProblem::Empty));
        assert_eq!(check("   "), Err(KeyProblem::Blank));
        assert_eq!(check("\u{3000}"), Err(KeyProblem::Blank), "an ideographic space is blank too");
        assert_eq!(check("job\n"), Err(KeyProblem::Control { at: 3 }));
        assert_eq!(check("\tjob"), Err(KeyProblem::Control { at: 0 }));
        assert_eq!(check("a\u{7f}"), Err(KeyProblem::Control { at: 1 }));
        assert_eq!(check("é\u{85}"), Err(KeyProblem::Control { at: 2 }), "C1 controls, at their byte offset");
        for fine in ["invoice:inv_72", "{user1}.lock", " padded ", "a b", "ключ", "🔒"] {
            assert_eq!(check(fine), Ok(()), "{fine:?}");
        }
    }
}
