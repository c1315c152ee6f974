//! A guarded write's own part: what it sets and the state it requires.

use crate::dialect::Dialect;
use crate::error::Result;
use crate::ident::{push_quoted, quote};

/// What one guarded `UPDATE` sets and the state precondition it adds to the fence condition.
/// The driver modules name it with their parameter type:
/// `postgres::Update` (feature `postgres`), `sqlite::Update` (feature `sqlite`).
///
/// Values are bound parameters; the `*_sql` methods take SQL text the program itself writes
/// (like any query string), never input.
#[derive(Debug)]
pub struct Update<'a, P: ?Sized> {
    sets: Vec<(String, Value<'a, P>)>,
    conditions: Vec<Condition<'a, P>>,
}

#[derive(Debug)]
enum Value<'a, P: ?Sized> {
    Bound(&'a P),
    Sql(String),
}

#[derive(Debug)]
enum Condition<'a, P: ?Sized> {
    Equals(String, &'a P),
    In(String, Vec<&'a P>),
    Sql(String),
}

impl<'a, P: ?Sized> Default for Update<'a, P> {
    fn default() -> Self {
        Update { sets: Vec::new(), conditions: Vec::new() }
    }
}

impl<'a, P: ?Sized> Update<'a, P> {
    /// An update that sets nothing but the fence (add columns with [`Update::set`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `column` to a bound value.
    pub fn set(mut self, column: &str, value: &'a P) -> Self {
        self.sets.push((column.to_owned(), Value::Bound(value)));
        self
    }

    /// Sets `column` to an SQL expression, e.g. `set_sql("sent", r#""sent" + 1"#)`.
    pub fn set_sql(mut self, column: &str, expression: &str) -> Self {
        self.sets.push((column.to_owned(), Value::Sql(expression.to_owned())));
        self
    }

    /// Requires `column = value` (the lesson's `status = 'PENDING'`).
    pub fn when(mut self, column: &str, value: &'a P) -> Self {
        self.conditions.push(Condition::Equals(column.to_owned(), value));
        self
    }

    /// Requires `column` to be one of `values` (`state IN ('PENDING', 'SUBMITTING')`); no
    /// values match no row.
    pub fn when_in(mut self, column: &str, values: &[&'a P]) -> Self {
        self.conditions.push(Condition::In(column.to_owned(), values.to_vec()));
        self
    }

    /// Requires an SQL predicate, e.g. `when_sql(r#""amount_cents" > 0"#)`.
    pub fn when_sql(mut self, predicate: &str) -> Self {
        self.conditions.push(Condition::Sql(predicate.to_owned()));
        self
    }

    /// Whether the write has a state precondition (then zero rows matched at a fence that is
    /// not stale means the state moved on, not a missing row).
    pub fn has_precondition(&self) -> bool {
        !self.conditions.is_empty()
    }

    /// The columns it sets and compares, as given (SQLite's helpers check them against the table).
    #[cfg(feature = "sqlite")]
    pub(crate) fn columns(&self) -> impl Iterator<Item = &str> {
        let sets = self.sets.iter().map(|(column, _)| column.as_str());
        let compared = self.conditions.iter().filter_map(|condition| match condition {
            Condition::Equals(column, _) | Condition::In(column, _) => Some(column.as_str()),
            Condition::Sql(_) => None,
        });
        sets.chain(compared)
    }

    /// Appends the `SET` assignments (each followed by `, `, so the fence's comes last) to
    /// `sets` and the precondition (` AND …` clauses) to `conditions`, with placeholders
    /// numbered from `first`; returns the values they bind, in order.
    pub(crate) fn render(
        &self,
        dialect: Dialect,
        first: usize,
        sets: &mut String,
        conditions: &mut String,
    ) -> Result<Vec<&'a P>> {
        let mut params = Vec::with_capacity(self.sets.len() + self.conditions.len());
        let mut bind = |out: &mut String, value: &'a P| {
            params.push(value);
            dialect.push_placeholder(out, first + params.len() - 1);
        };
        for (column, value) in &self.sets {
            push_quoted(sets, column)?;
            sets.push_str(" = ");
            match value {
                Value::Bound(v) => bind(sets, v),
                Value::Sql(sql) => push_parenthesized(sets, sql),
            }
            sets.push_str(", ");
        }
        for condition in &self.conditions {
            conditions.push_str(" AND ");
            match condition {
                Condition::Equals(column, value) => {
                    push_quoted(conditions, column)?;
                    conditions.push_str(" = ");
                    bind(conditions, value);
                }
                Condition::In(column, values) if values.is_empty() => {
                    quote(column)?; // refused names are refused here too
                    conditions.push_str("FALSE");
                }
                Condition::In(column, values) => {
                    push_quoted(conditions, column)?;
                    conditions.push_str(" IN (");
                    for (i, value) in values.iter().enumerate() {
                        if i > 0 {
                            conditions.push_str(", ");
                        }
                        bind(conditions, value);
                    }
                    conditions.push(')');
                }
                Condition::Sql(sql) => push_parenthesized(conditions, sql),
            }
        }
        Ok(params)
    }
}

fn push_parenthesized(out: &mut String, sql: &str) {
    out.push('(');
    out.push_str(sql);
    out.push(')');
}
