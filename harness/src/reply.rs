//! Small readers for server replies that tests compare.

use std::collections::HashMap;

/// An error reply as the server sent it, e.g. `"WRONGTYPE Operation against a key ..."`.
///
/// The `redis` crate splits the code from the detail and decorates `Display`; tests assert on
/// the server's own words, so this puts them back together.
pub fn error_text(err: &redis::RedisError) -> String {
    match (err.code(), err.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => err.to_string(),
    }
}

/// Parse an `INFO` reply into `field -> value` (section headers and blank lines skipped).
pub fn parse_info(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_info_fields() {
        let info =
            parse_info("# Replication\r\nrole:master\r\nslave0:ip=127.0.0.1,port=1,state=online\r\n\r\n");
        assert_eq!(info["role"], "master");
        assert_eq!(info["slave0"], "ip=127.0.0.1,port=1,state=online");
        assert_eq!(info.len(), 2);
    }
}
