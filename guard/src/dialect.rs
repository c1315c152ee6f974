//! Which database a statement is for, as the statements (`sql`), the table and the update
//! spell it.

/// Which database a statement is for: its placeholders and its fence column type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// `$1`, `bigint`.
    Postgres,
    /// `?1`, `INTEGER` (SQLite's 64-bit signed integer).
    Sqlite,
}

impl Dialect {
    /// The placeholder of the 1-based parameter `n`.
    pub fn placeholder(self, n: usize) -> String {
        let mut out = String::with_capacity(4);
        self.push_placeholder(&mut out, n);
        out
    }

    /// Appends [`Dialect::placeholder`]`(n)` to `out`.
    pub(crate) fn push_placeholder(self, out: &mut String, n: usize) {
        use std::fmt::Write as _;
        let _ = match self {
            Dialect::Postgres => write!(out, "${n}"),
            Dialect::Sqlite => write!(out, "?{n}"),
        };
    }

    /// The fence column's type.
    pub(crate) fn fence_type(self) -> &'static str {
        match self {
            Dialect::Postgres => "bigint",
            Dialect::Sqlite => "INTEGER",
        }
    }
}
