//! SQL identifiers from the user (table, schema and column names), quoted.
//!
//! Every name the crate puts into a statement goes through [`quote`]: wrapped in double quotes
//! with each `"` doubled, the SQL standard's delimited identifier, which PostgreSQL and SQLite
//! both read back as exactly the given name, whatever characters it holds. Values never go
//! into statement text: they are bound parameters.

use crate::error::{Error, Result};

/// PostgreSQL's longest identifier (`NAMEDATALEN - 1` bytes). It truncates longer names with
/// only a notice, so two long names could silently become one column; refuse them instead.
pub const MAX_IDENTIFIER_BYTES: usize = 63;

/// `name` as a delimited identifier: `"…"` with each `"` doubled. Refuses an empty name,
/// a NUL byte (neither database accepts one) and a name longer than
/// [`MAX_IDENTIFIER_BYTES`].
pub fn quote(name: &str) -> Result<String> {
    let mut quoted = String::with_capacity(name.len() + 2);
    push_quoted(&mut quoted, name)?;
    Ok(quoted)
}

/// Appends [`quote`]`(name)` to `out` (on error, `out` is unchanged).
pub(crate) fn push_quoted(out: &mut String, name: &str) -> Result<()> {
    let refuse = |reason| Err(Error::Identifier { name: name.to_owned(), reason });
    if name.is_empty() {
        return refuse("empty");
    }
    if name.contains('\0') {
        return refuse("contains a NUL byte");
    }
    if name.len() > MAX_IDENTIFIER_BYTES {
        return refuse("longer than 63 bytes (PostgreSQL would truncate it)");
    }
    out.push('"');
    for part in name.split_inclusive('"') {
        out.push_str(part);
        if part.ends_with('"') {
            out.push('"');
        }
    }
    out.push('"');
    Ok(())
}

/// Each name quoted, joined with `, `.
pub fn quote_list(names: &[&str]) -> Result<String> {
    let mut out = String::new();
    push_quoted_list(&mut out, names)?;
    Ok(out)
}

/// Appends [`quote_list`]`(names)` to `out`.
pub(crate) fn push_quoted_list(out: &mut String, names: &[&str]) -> Result<()> {
    for (i, name) in names.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        push_quoted(out, name)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_wrapped_in_double_quotes_with_inner_quotes_doubled() {
        assert_eq!(quote("invoices").unwrap(), r#""invoices""#);
        assert_eq!(quote("Last Fence").unwrap(), r#""Last Fence""#);
        assert_eq!(quote(r#"a"b"#).unwrap(), r#""a""b""#);
        assert_eq!(quote(r#"x"; DROP TABLE t; --"#).unwrap(), r#""x""; DROP TABLE t; --""#);
        assert_eq!(quote("ünïcödé").unwrap(), "\"ünïcödé\"");
        assert_eq!(quote_list(&["a", "b\"c"]).unwrap(), r#""a", "b""c""#);
    }

    #[test]
    fn empty_nul_and_overlong_names_are_refused() {
        for bad in ["", "a\0b", &"x".repeat(64)] {
            let err = quote(bad).unwrap_err();
            assert!(matches!(err, Error::Identifier { ref name, .. } if name == bad), "{err}");
        }
        assert!(quote(&"x".repeat(63)).is_ok());
        assert!(quote_list(&["ok", ""]).is_err());
    }
}
