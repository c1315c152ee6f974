//! Lease tokens between shell commands: printed, or kept in a file only the owner can read.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use fencedlock::{Token, MAX_TOKEN_LEN};

use crate::args::TokenSource;
use crate::error::CliError;

/// The token as text. Tokens made by this CLI are 32 hex characters (the bytes the server
/// stores are those characters, so `redis-cli` can use them as they are).
pub fn to_text(token: &Token) -> String {
    String::from_utf8_lossy(token.as_bytes()).into_owned()
}

/// The token from `--token` / `FENCEDLOCK_TOKEN` or `--token-file`.
pub fn read(source: &TokenSource) -> Result<Token, CliError> {
    let (text, origin) = match (&source.token, &source.token_file) {
        (Some(text), _) => (text.clone(), "--token".to_string()),
        (None, Some(path)) => (
            fs::read_to_string(path).map_err(|e| {
                CliError::Usage(format!(
                    "cannot read token file {}: {e}; pass the file written by `fencedlock acquire --token-file`",
                    path.display()
                ))
            })?,
            format!("token file {}", path.display()),
        ),
        (None, None) => {
            return Err(CliError::Usage(
                "no token: pass --token TOKEN, FENCEDLOCK_TOKEN, or --token-file PATH".into(),
            ))
        }
    };
    let text = text.trim();
    if text.contains(char::is_whitespace) {
        return Err(CliError::Usage(format!(
            "the {origin} holds more than one word; it must contain only the token printed by `fencedlock acquire`"
        )));
    }
    Token::from_bytes(text.as_bytes().to_vec()).map_err(|_| {
        CliError::Usage(format!(
            "the {origin} is empty or longer than {MAX_TOKEN_LEN} bytes; pass the token printed by `fencedlock acquire`"
        ))
    })
}

/// Writes the token to `path`, readable by the owner only (mode 0600, replaced atomically
/// so a reader never sees half a token).
pub fn write(path: &Path, token: &Token) -> Result<(), CliError> {
    let fail = |e: std::io::Error| {
        CliError::Io(format!(
            "cannot write token file {}: {e}; choose a writable path for --token-file",
            path.display()
        ))
    };
    let file_name = path
        .file_name()
        .ok_or_else(|| CliError::Usage(format!("--token-file {} is not a file path", path.display())))?;
    let mut tmp_name = file_name.to_os_string();
    tmp_name.push(format!(".tmp{}", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let result = (|| {
        let mut file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        file.write_all(to_text(token).as_bytes())?;
        file.write_all(b"\n")?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map_err(fail)
}
