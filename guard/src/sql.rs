//! The statements, built once here for both databases.
//!
//! Every statement binds the fence as parameter 1 and the row id as parameter 2, then the
//! update's own values. The fence check and the write are always the same statement:
//!
//! ```text
//! claim:  UPDATE t SET "last_fence" = $1 WHERE "id" = $2 AND "last_fence" <= $1 RETURNING …
//! write:  UPDATE t SET …, "last_fence" = $1 WHERE "id" = $2 AND "last_fence" <= $1 [AND …]
//! ```

use crate::dialect::Dialect;
use crate::error::Result;
use crate::ident::{push_quoted, push_quoted_list, quote_list};
use crate::table::Table;
use crate::update::Update;

/// The parameter every statement binds the fence to.
const FENCE_PARAM: usize = 1;
/// The parameter every statement binds the row id to.
const ID_PARAM: usize = 2;
/// The first parameter of an update's own values.
const FIRST_UPDATE_PARAM: usize = 3;
/// The first name [`unknown_column`] asks about (1 and 2 are the table and its schema).
#[cfg(feature = "sqlite")]
const FIRST_NAME_PARAM: usize = 3;

/// `ALTER TABLE t ADD COLUMN "last_fence" bigint NOT NULL DEFAULT 0`.
pub fn add_fence_column(table: &Table, dialect: Dialect) -> Result<String> {
    Ok(format!(
        "ALTER TABLE {} ADD COLUMN {} {} NOT NULL DEFAULT 0",
        table.quoted_name()?,
        table.quoted_fence()?,
        dialect.fence_type()
    ))
}

/// PostgreSQL's schema step: [`add_fence_column`] unless the table has the column already.
#[cfg(any(feature = "postgres", test))]
pub fn add_fence_column_if_absent(table: &Table) -> Result<String> {
    Ok(add_fence_column(table, Dialect::Postgres)?.replacen(" ADD COLUMN ", " ADD COLUMN IF NOT EXISTS ", 1))
}

/// SQLite's schema step asks first whether the table (parameter 1, in schema parameter 2) has
/// the fence column (parameter 3): one row if it has.
#[cfg(feature = "sqlite")]
pub const FENCE_COLUMN_PRESENT: &str = "SELECT 1 FROM pragma_table_info(?1, ?2) WHERE name = ?3";

/// The claim: raise the fence where it is not above ours, and return what the holder inherits.
pub fn claim(table: &Table, dialect: Dialect, returning: &[&str]) -> Result<String> {
    let fence = table.quoted_fence()?;
    let returning = if returning.is_empty() { fence.clone() } else { quote_list(returning)? };
    Ok(format!(
        "UPDATE {table} SET {fence} = {f} WHERE {id} = {i} AND {fence} <= {f} RETURNING {returning}",
        table = table.quoted_name()?,
        id = table.quoted_id()?,
        f = dialect.placeholder(FENCE_PARAM),
        i = dialect.placeholder(ID_PARAM),
    ))
}

/// The statements a [`Table`] hands out, for callers that run their own.
impl Table {
    /// The schema step, as SQL to run once per table:
    /// `ALTER TABLE … ADD COLUMN last_fence bigint NOT NULL DEFAULT 0` (SQLite: `INTEGER`).
    /// Existing rows get 0, below every fence, so the first holder's claim or write passes.
    pub fn add_fence_column_sql(&self, dialect: Dialect) -> Result<String> {
        add_fence_column(self, dialect)
    }

    /// The claim statement the helpers run: raise the row's fence to `$1` where it is not
    /// above it, for the row `$2`, returning `returning` (the fence column if empty).
    pub fn claim_sql(&self, dialect: Dialect, returning: &[&str]) -> Result<String> {
        claim(self, dialect, returning)
    }
}

/// A guarded write: the update's assignments plus the fence, where the fence is not above ours
/// and the precondition holds; and the update's values (parameters 3 on). Built in one buffer:
/// it runs on every write.
pub fn write<'a, P: ?Sized>(
    table: &Table,
    dialect: Dialect,
    update: &Update<'a, P>,
    returning: &[&str],
) -> Result<(String, Vec<&'a P>)> {
    let mut sql = String::with_capacity(160);
    let mut conditions = String::new();
    sql.push_str("UPDATE ");
    table.push_quoted_name(&mut sql)?;
    sql.push_str(" SET ");
    let params = update.render(dialect, FIRST_UPDATE_PARAM, &mut sql, &mut conditions)?;
    push_quoted(&mut sql, table.fence_column_name())?;
    sql.push_str(" = ");
    dialect.push_placeholder(&mut sql, FENCE_PARAM);
    sql.push_str(" WHERE ");
    push_quoted(&mut sql, table.id_column_name())?;
    sql.push_str(" = ");
    dialect.push_placeholder(&mut sql, ID_PARAM);
    sql.push_str(" AND ");
    push_quoted(&mut sql, table.fence_column_name())?;
    sql.push_str(" <= ");
    dialect.push_placeholder(&mut sql, FENCE_PARAM);
    sql.push_str(&conditions);
    if !returning.is_empty() {
        sql.push_str(" RETURNING ");
        push_quoted_list(&mut sql, returning)?;
    }
    Ok((sql, params))
}

/// The row's fence, read after a statement matched no row to tell why (parameter 1: the id).
pub fn fence_of(table: &Table, dialect: Dialect) -> Result<String> {
    Ok(format!(
        "SELECT {} FROM {} WHERE {} = {}",
        table.quoted_fence()?,
        table.quoted_name()?,
        table.quoted_id()?,
        dialect.placeholder(1)
    ))
}

/// SQLite only: the first of `names` (parameters 3 on) that is no column of the table
/// (parameter 1, in schema parameter 2, or NULL for SQLite's search order), else no row. SQLite
/// reads a double-quoted name that matches no column as a string literal, so the helpers ask
/// first. Names match as SQLite matches them (ASCII case folded); `rowid`, `oid` and `_rowid_`
/// are names on a table with a rowid (WITHOUT ROWID: its primary key index carries no rowid,
/// `cid` -1). A table with no columns does not exist: the statement itself then says so.
#[cfg(feature = "sqlite")]
pub fn unknown_column(names: usize) -> String {
    let mut sql = String::from("SELECT n.column1 FROM (VALUES ");
    for i in 0..names {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push('(');
        Dialect::Sqlite.push_placeholder(&mut sql, FIRST_NAME_PARAM + i);
        sql.push(')');
    }
    sql.push_str(
        ") AS n WHERE EXISTS (SELECT 1 FROM pragma_table_xinfo(?1, ?2)) \
         AND n.column1 COLLATE NOCASE NOT IN (SELECT name FROM pragma_table_xinfo(?1, ?2)) \
         AND (n.column1 COLLATE NOCASE NOT IN ('rowid', 'oid', '_rowid_') \
         OR EXISTS (SELECT 1 FROM pragma_index_list(?1, ?2) AS i WHERE i.origin = 'pk' \
         AND NOT EXISTS (SELECT 1 FROM pragma_index_xinfo(i.name, ?2) WHERE cid = -1))) LIMIT 1",
    );
    sql
}

#[cfg(test)]
mod tests {
    use super::*;

    type Update<'a> = crate::update::Update<'a, str>;

    #[test]
    fn the_claim_raises_the_fence_in_the_statement_that_returns_the_state() {
        let t = Table::new("invoice_jobs").id_column("job_id");
        assert_eq!(
            claim(&t, Dialect::Postgres, &["status"]).unwrap(),
            r#"UPDATE "invoice_jobs" SET "last_fence" = $1 WHERE "job_id" = $2 AND "last_fence" <= $1 RETURNING "status""#
        );
        assert_eq!(
            claim(&t.clone().schema("b\"x").fence_column("f"), Dialect::Sqlite, &[]).unwrap(),
            r#"UPDATE "b""x"."invoice_jobs" SET "f" = ?1 WHERE "job_id" = ?2 AND "f" <= ?1 RETURNING "f""#
        );
    }

    #[test]
    fn a_write_adds_the_fence_to_its_assignments_and_its_condition_and_numbers_its_values() {
        let t = Table::new("payouts").id_column("payout_id");
        let update = Update::new()
            .set("state", "SUBMITTED")
            .set_sql("attempts", r#""attempts" + 1"#)
            .set("provider_ref", "ref")
            .when("state", "SUBMITTING")
            .when_in("kind", &["a", "b"])
            .when_sql(r#""amount_cents" > 0"#);
        let (sql, params) = write(&t, Dialect::Postgres, &update, &["state"]).unwrap();
        assert_eq!(
            sql,
            r#"UPDATE "payouts" SET "state" = $3, "attempts" = ("attempts" + 1), "provider_ref" = $4, "last_fence" = $1 WHERE "payout_id" = $2 AND "last_fence" <= $1 AND "state" = $5 AND "kind" IN ($6, $7) AND ("amount_cents" > 0) RETURNING "state""#
        );
        assert_eq!(params, vec!["SUBMITTED", "ref", "SUBMITTING", "a", "b"]);

        let (sql, params) = write(&t, Dialect::Sqlite, &Update::new(), &[]).unwrap();
        assert_eq!(
            sql,
            r#"UPDATE "payouts" SET "last_fence" = ?1 WHERE "payout_id" = ?2 AND "last_fence" <= ?1"#
        );
        assert!(params.is_empty());
        let (sql, _) = write(&t, Dialect::Sqlite, &Update::new().when_in("state", &[]), &[]).unwrap();
        assert!(sql.ends_with(r#"AND "last_fence" <= ?1 AND FALSE"#), "{sql}");
    }

    #[test]
    fn the_schema_step_and_the_fence_read() {
        let t = Table::new("invoice_jobs");
        assert_eq!(
            add_fence_column(&t, Dialect::Postgres).unwrap(),
            r#"ALTER TABLE "invoice_jobs" ADD COLUMN "last_fence" bigint NOT NULL DEFAULT 0"#
        );
        assert_eq!(
            add_fence_column(&t, Dialect::Sqlite).unwrap(),
            r#"ALTER TABLE "invoice_jobs" ADD COLUMN "last_fence" INTEGER NOT NULL DEFAULT 0"#
        );
        assert_eq!(
            fence_of(&t, Dialect::Postgres).unwrap(),
            r#"SELECT "last_fence" FROM "invoice_jobs" WHERE "id" = $1"#
        );
    }

    #[test]
    #[cfg(feature = "sqlite")]
    fn sqlite_asks_for_a_name_that_is_no_column_first() {
        assert_eq!(
            unknown_column(2),
            r#"SELECT n.column1 FROM (VALUES (?3), (?4)) AS n WHERE EXISTS (SELECT 1 FROM pragma_table_xinfo(?1, ?2)) AND n.column1 COLLATE NOCASE NOT IN (SELECT name FROM pragma_table_xinfo(?1, ?2)) AND (n.column1 COLLATE NOCASE NOT IN ('rowid', 'oid', '_rowid_') OR EXISTS (SELECT 1 FROM pragma_index_list(?1, ?2) AS i WHERE i.origin = 'pk' AND NOT EXISTS (SELECT 1 FROM pragma_index_xinfo(i.name, ?2) WHERE cid = -1))) LIMIT 1"#
        );
    }

    #[test]
    fn a_bad_name_anywhere_is_refused_before_any_sql_exists() {
        let bad = Table::new("");
        assert!(claim(&bad, Dialect::Postgres, &[]).is_err());
        assert!(claim(&Table::new("t").id_column("a\0"), Dialect::Postgres, &[]).is_err());
        assert!(claim(&Table::new("t"), Dialect::Postgres, &[""]).is_err());
        assert!(write(&Table::new("t"), Dialect::Postgres, &Update::new().set("", "v"), &[]).is_err());
        assert!(write(&Table::new("t"), Dialect::Postgres, &Update::new().when_in("", &[]), &[]).is_err());
        assert!(add_fence_column(&Table::new("t").fence_column(""), Dialect::Sqlite).is_err());
    }
}
