//! Keeps lease tokens out of errors.
//!
//! A server that does not know a command answers e.g. `ERR unknown command
//! 'FENCEDLOCK.ACQUIRE', with args beginning with: 'key' '<the token>' '30000'`, and such text
//! would otherwise travel into [`Error`](crate::Error) and [`QuorumReport`](crate::QuorumReport)
//! displays and from there into logs. Every reply error passes through [`error`] in the node
//! layer, before anything else sees it, so no error or report the crate produces holds a token.
//!
//! The error stays a [`RedisError`] of the same kind and code (a server error is rebuilt from
//! its code and the cleaned text), so `kind()`, `code()` and the retry classification work
//! as before; only the text changes.

use std::borrow::Cow;

use redis::{RedisError, ServerError, Value};

use crate::token::hex;

/// What replaces an echoed argument list.
const ARGS_REDACTED: &str = "<redacted>";

/// What replaces an occurrence of the token.
const TOKEN_REDACTED: &str = "<token>";

/// The phrase after which Redis and Valkey quote a rejected command's arguments.
const ARGS_PHRASE: &str = "with args beginning with";

/// `err` with echoed arguments and every occurrence of `token` removed from its text.
///
/// Errors whose text holds neither are returned unchanged (so I/O and timeout errors keep
/// their exact identity).
pub(crate) fn error(err: RedisError, token: Option<&[u8]>) -> RedisError {
    let needles = token.map(needles).unwrap_or_default();
    match ServerError::try_from(err) {
        Ok(server) => server_error(server, &needles),
        Err(err) => {
            let shown = err.to_string();
            match text(&shown, &needles) {
                Cow::Borrowed(_) => err,
                Cow::Owned(clean) => RedisError::from((err.kind(), "error text redacted", clean)),
            }
        }
    }
}

/// A server error rebuilt from its cleaned code and detail, so its kind stays the same.
fn server_error(server: ServerError, needles: &[String]) -> RedisError {
    let code = text(server.code(), needles);
    let detail = server.details().map(|d| text(d, needles));
    let unchanged =
        matches!(code, Cow::Borrowed(_)) && detail.as_ref().is_none_or(|d| matches!(d, Cow::Borrowed(_)));
    if unchanged {
        return server.into();
    }
    // The parser maps the code to the same kind (ERR, TRYAGAIN, LOADING, ... or an
    // extension code such as WRONGTYPE) that the original reply had.
    let one_line = |s: &str| s.replace(['\r', '\n'], " ");
    let line = match &detail {
        Some(detail) => format!("-{} {}\r\n", one_line(&code), one_line(detail)),
        None => format!("-{}\r\n", one_line(&code)),
    };
    match redis::parse_redis_value(line.as_bytes()) {
        Ok(Value::ServerError(rebuilt)) => rebuilt.into(),
        _ => redis::make_extension_error(code.into_owned(), detail.map(Cow::into_owned)),
    }
}

/// `text` without echoed arguments and without any spelling of the token in `needles`.
fn text<'a>(text: &'a str, needles: &[String]) -> Cow<'a, str> {
    let mut out = Cow::Borrowed(text);
    if let Some(at) = text.to_ascii_lowercase().find(ARGS_PHRASE) {
        // ASCII lowercasing keeps byte offsets, so `at` is a char boundary in `text`.
        out = Cow::Owned(format!("{}{ARGS_PHRASE}: {ARGS_REDACTED}", &text[..at]));
    }
    for needle in needles {
        if out.contains(needle.as_str()) {
            out = Cow::Owned(out.replace(needle.as_str(), TOKEN_REDACTED));
        }
    }
    out
}

/// The ways a token can appear in error text: as sent (decoded lossily, as the client decodes
/// error text), with line breaks turned into spaces (Redis does that to echoed arguments),
/// and in hex.
fn needles(token: &[u8]) -> Vec<String> {
    let sent = String::from_utf8_lossy(token).into_owned();
    let spaced = sent.replace(['\r', '\n'], " ");
    let hex = hex(token);
    let upper = hex.to_ascii_uppercase();
    let mut needles = vec![sent, spaced, hex, upper];
    needles.sort();
    needles.dedup();
    // Longest first, so a spelling that contains another is replaced whole.
    needles.sort_by_key(|n| std::cmp::Reverse(n.len()));
    needles.retain(|n| !n.is_empty());
    needles
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::Token;
    use redis::{ErrorKind, ServerErrorKind};

    fn reply_error(line: &[u8]) -> RedisError {
        match redis::parse_redis_value(line) {
            Ok(Value::ServerError(e)) => e.into(),
            other => panic!("not an error reply: {other:?}"),
        }
    }

    fn assert_clean(err: &RedisError, token: &Token) {
        let shown = format!("{err} / {err:?}");
        for needle in needles(token.as_bytes()) {
            assert!(!shown.contains(&needle), "{needle:?} in {shown}");
        }
    }

    #[test]
    fn echoed_arguments_are_cut_and_the_kind_is_kept() {
        let token = Token::from_bytes(b"0123456789abcdef0123456789abcdef".to_vec()).unwrap();
        let name = fencedlock_protocol::command::ACQUIRE.name;
        let original = reply_error(
            format!("-ERR unknown command '{name}', with args beginning with: 'k' '0123456789abcdef0123456789abcdef' '30000' \r\n")
                .as_bytes(),
        );
        let clean = error(original, Some(token.as_bytes()));
        assert_clean(&clean, &token);
        assert_eq!(clean.kind(), ErrorKind::Server(ServerErrorKind::ResponseError));
        assert_eq!(clean.code(), Some("ERR"));
        assert_eq!(
            clean.detail(),
            Some(format!("unknown command '{name}', with args beginning with: <redacted>").as_str())
        );
        // Even without knowing the token, the echoed arguments go.
        let anonymous =
            error(reply_error(b"-ERR unknown command 'X', with args beginning with: 'secret' \r\n"), None);
        assert!(!anonymous.to_string().contains("secret"), "{anonymous}");
    }

    #[test]
    fn the_token_is_replaced_wherever_it_appears() {
        let token = Token::from_bytes(b"s3cr3t\r\nline".to_vec()).unwrap();
        // As sent, with Redis's line-break replacement, and in hex.
        for line in [
            b"-WRONGTYPE s3cr3t  line is not a lock\r\n".to_vec(),
            format!("-TRYAGAIN lease for {} refused\r\n", token.to_hex()).into_bytes(),
            format!("-TRYAGAIN lease for {} refused\r\n", token.to_hex().to_uppercase()).into_bytes(),
        ] {
            let original = reply_error(&line);
            let (kind, code) = (original.kind(), original.code().map(str::to_owned));
            let clean = error(original, Some(token.as_bytes()));
            assert_clean(&clean, &token);
            assert_eq!(clean.kind(), kind, "{clean}");
            assert_eq!(clean.code().map(str::to_owned), code);
            assert!(clean.to_string().contains("<token>"), "{clean}");
        }
        let retry = error(reply_error(b"-TRYAGAIN s3cr3t  line\r\n"), Some(token.as_bytes()));
        assert!(crate::cause::Cause::of(&retry).is_retryable(), "still retryable: {retry}");
    }

    #[test]
    fn errors_without_the_token_are_untouched() {
        let token = Token::from_bytes(b"tok".to_vec()).unwrap();
        let io = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let kept = error(io, Some(token.as_bytes()));
        assert!(kept.is_io_error() && kept.is_connection_refusal(), "{kept:?}");
        let loading = error(reply_error(b"-LOADING Redis is loading\r\n"), Some(token.as_bytes()));
        assert_eq!(loading.kind(), ErrorKind::Server(ServerErrorKind::BusyLoading));
        assert_eq!(loading.detail(), Some("Redis is loading"));
    }

    #[test]
    fn client_errors_that_quote_the_token_keep_their_kind() {
        let token = Token::from_bytes(b"hunter2hunter2".to_vec()).unwrap();
        let original =
            RedisError::from((ErrorKind::UnexpectedReturnType, "bad reply", "got hunter2hunter2".to_owned()));
        let clean = error(original, Some(token.as_bytes()));
        assert_clean(&clean, &token);
        assert_eq!(clean.kind(), ErrorKind::UnexpectedReturnType);
    }

    #[test]
    fn binary_tokens_are_matched_as_decoded() {
        let token = Token::from_bytes(vec![0xff, b'a', b'b', b'c', 0xfe]).unwrap();
        // RESP3 blob errors are decoded lossily.
        let original = reply_error(b"!11\r\nERR \xffabc\xfe x\r\n");
        let clean = error(original, Some(token.as_bytes()));
        assert_clean(&clean, &token);
        assert_eq!(clean.code(), Some("ERR"));
    }
}
