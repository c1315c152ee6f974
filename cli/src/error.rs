//! The CLI's error type and its exit codes (sysexits.h where one fits), so cron wrappers and
//! scripts can tell "skipped, somebody else runs it" from "broken, page someone".

/// Exit codes of `fencedlock`. Any other code after a command ran is the command's own.
pub mod code {
    /// Success (or the command's own 0).
    pub const OK: u8 = 0;
    /// Bad arguments: unknown option, bad duration, bad URL, unreadable token file.
    pub const USAGE: u8 = 64;
    /// The billing demo saw its invariant violated (what `--no-fence` demonstrates).
    #[cfg_attr(not(feature = "demo"), allow(dead_code))]
    pub const INVARIANT: u8 = 65;
    /// A server is unreachable, times out, is not ready, lacks the module or denies this user
    /// the commands or the key (ACL), or no majority answered.
    pub const UNAVAILABLE: u8 = 69;
    /// An unexpected error from a server or from fencedlock itself.
    pub const INTERNAL: u8 = 70;
    /// Writing the token file failed.
    pub const IO: u8 = 74;
    /// The lock is held by another owner (skipped, or `--wait` ran out).
    pub const BUSY: u8 = 75;
    /// The lease was lost: the command was terminated, or renew/release found it gone.
    pub const LEASE_LOST: u8 = 76;
    /// The TLS set-up is wrong (`EX_CONFIG`): a server certificate that does not verify, a
    /// client certificate the server refuses. Not 69: retrying or failing open cannot fix it.
    pub const CONFIG: u8 = 78;
    /// The command could not be executed (permission denied, not executable).
    pub const NOT_EXECUTABLE: u8 = 126;
    /// The command was not found.
    pub const NOT_FOUND: u8 = 127;
    /// Added to a signal number when the command (or fencedlock, before it started the
    /// command) was ended by that signal.
    pub const SIGNAL_BASE: u8 = 128;
}

/// Everything that makes `fencedlock` exit without a command's own exit code.
///
/// Every message is one line that says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad arguments or options.
    #[error("{0}")]
    Usage(String),
    /// A server cannot be used (unreachable, no module, no permission, no majority).
    #[error("{0}")]
    Unavailable(String),
    /// Another owner holds the lock.
    #[error("{0}")]
    Busy(String),
    /// The lease is gone.
    #[error("{0}")]
    LeaseLost(String),
    /// The command could not be started.
    #[error("{message}")]
    Spawn {
        /// What went wrong, with the command's name.
        message: String,
        /// 126 or 127, as a shell would report it.
        code: u8,
    },
    /// A local file could not be written.
    #[error("{0}")]
    Io(String),
    /// The TLS configuration does not match the server's.
    #[error("{0}")]
    Config(String),
    /// Anything unexpected.
    #[error("{0}")]
    Internal(String),
}

impl CliError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => code::USAGE,
            CliError::Unavailable(_) => code::UNAVAILABLE,
            CliError::Busy(_) => code::BUSY,
            CliError::LeaseLost(_) => code::LEASE_LOST,
            CliError::Spawn { code, .. } => *code,
            CliError::Io(_) => code::IO,
            CliError::Config(_) => code::CONFIG,
            CliError::Internal(_) => code::INTERNAL,
        }
    }

    /// A stable name for `--json` output.
    pub fn kind(&self) -> &'static str {
        match self {
            CliError::Usage(_) => "usage",
            CliError::Unavailable(_) => "unavailable",
            CliError::Busy(_) => "busy",
            CliError::LeaseLost(_) => "lease_lost",
            CliError::Spawn { .. } => "spawn",
            CliError::Io(_) => "io",
            CliError::Config(_) => "config",
            CliError::Internal(_) => "internal",
        }
    }

    /// The message flattened to one line (server errors may carry newlines).
    pub fn one_line(&self) -> String {
        self.to_string().split_whitespace().collect::<Vec<_>>().join(" ")
    }
}
