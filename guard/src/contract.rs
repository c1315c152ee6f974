//! The guard's contract as data: `guard/contract.json` holds the statements this crate builds
//! (by its own functions, for PostgreSQL and SQLite, from the sample inputs written beside
//! them), how it quotes names and which it refuses, its default column names, resource labels,
//! the stale-refusal counter, and the texts of the errors other clients mirror. The Python
//! guard (`python/tests/test_resource_contract.py`) builds the same statements from the same
//! inputs and compares. The test below fails when the committed file is stale;
//! `FENCEDLOCK_BLESS=1 cargo test -p fencedlock-guard contract` rewrites it.
//!
//! Test-only: the crate's behaviour does not depend on it.

use crate::dialect::Dialect;
use crate::error::Error;
use crate::ident::{quote, quote_list, MAX_IDENTIFIER_BYTES};
use crate::metrics::{Step, RESOURCE, STALE_REFUSALS_TOTAL};
use crate::sql;
use crate::table::{Table, DEFAULT_FENCE_COLUMN, DEFAULT_ID_COLUMN};

type Update<'a> = crate::update::Update<'a, str>;

/// The file's values (`serde_json`: a test-only dependency, as this module is).
type Json = serde_json::Value;

fn s(text: &str) -> Json {
    Json::String(text.to_owned())
}

fn strs<'a>(items: impl IntoIterator<Item = &'a str>) -> Json {
    Json::Array(items.into_iter().map(s).collect())
}

fn obj<const N: usize>(fields: [(&'static str, Json); N]) -> Json {
    Json::Object(fields.into_iter().map(|(name, value)| (name.to_owned(), value)).collect())
}

/// A sample table: what the file records, and the [`Table`] the crate builds from it.
#[derive(Clone, Copy)]
struct Sample {
    name: &'static str,
    schema: Option<&'static str>,
    id_column: Option<&'static str>,
    fence_column: Option<&'static str>,
    resource_label: Option<&'static str>,
}

const fn table(name: &'static str) -> Sample {
    Sample { name, schema: None, id_column: None, fence_column: None, resource_label: None }
}

impl Sample {
    fn build(self) -> Table {
        let mut t = Table::new(self.name);
        if let Some(schema) = self.schema {
            t = t.schema(schema);
        }
        if let Some(id) = self.id_column {
            t = t.id_column(id);
        }
        if let Some(fence) = self.fence_column {
            t = t.fence_column(fence);
        }
        if let Some(label) = self.resource_label {
            t = t.resource_label(label);
        }
        t
    }

    /// Only the fields given: the rest are the defaults.
    fn json(self) -> Json {
        let mut fields = serde_json::Map::new();
        fields.insert("name".into(), s(self.name));
        for (name, value) in [
            ("schema", self.schema),
            ("id_column", self.id_column),
            ("fence_column", self.fence_column),
            ("resource_label", self.resource_label),
        ] {
            if let Some(value) = value {
                fields.insert(name.into(), s(value));
            }
        }
        Json::Object(fields)
    }
}

const JOBS: Sample = Sample { id_column: Some("job_id"), ..table("invoice_jobs") };
const PAYOUTS: Sample = Sample { id_column: Some("payout_id"), ..table("payouts") };

/// One step of an update, as the file writes it and as the crate applies it.
enum Op {
    Set(&'static str, &'static str),
    SetSql(&'static str, &'static str),
    When(&'static str, &'static str),
    WhenIn(&'static str, &'static [&'static str]),
    WhenSql(&'static str),
}

impl Op {
    fn apply<'a>(&self, update: Update<'a>) -> Update<'a> {
        match *self {
            Op::Set(column, value) => update.set(column, value),
            Op::SetSql(column, expression) => update.set_sql(column, expression),
            Op::When(column, value) => update.when(column, value),
            Op::WhenIn(column, values) => update.when_in(column, values),
            Op::WhenSql(predicate) => update.when_sql(predicate),
        }
    }

    fn json(&self) -> Json {
        match *self {
            Op::Set(column, value) => obj([("op", s("set")), ("column", s(column)), ("value", s(value))]),
            Op::SetSql(column, sql) => obj([("op", s("set_sql")), ("column", s(column)), ("sql", s(sql))]),
            Op::When(column, value) => obj([("op", s("when")), ("column", s(column)), ("value", s(value))]),
            Op::WhenIn(column, values) => {
                obj([("op", s("when_in")), ("column", s(column)), ("values", strs(values.iter().copied()))])
            }
            Op::WhenSql(sql) => obj([("op", s("when_sql")), ("sql", s(sql))]),
        }
    }
}

fn dialect(d: Dialect) -> Json {
    s(match d {
        Dialect::Postgres => "postgres",
        Dialect::Sqlite => "sqlite",
    })
}

fn claim(name: &str, t: Sample, d: Dialect, returning: &[&str]) -> Json {
    obj([
        ("name", s(name)),
        ("statement", s("claim")),
        ("dialect", dialect(d)),
        ("table", t.json()),
        ("returning", strs(returning.iter().copied())),
        ("sql", s(&sql::claim(&t.build(), d, returning).unwrap())),
    ])
}

fn write_statement(name: &str, t: Sample, d: Dialect, ops: &[Op], returning: &[&str]) -> Json {
    let update = ops.iter().fold(Update::new(), |u, op| op.apply(u));
    let (sql, values) = sql::write(&t.build(), d, &update, returning).unwrap();
    obj([
        ("name", s(name)),
        ("statement", s("write")),
        ("dialect", dialect(d)),
        ("table", t.json()),
        ("update", Json::Array(ops.iter().map(Op::json).collect())),
        ("returning", strs(returning.iter().copied())),
        ("sql", s(&sql)),
        ("values", strs(values)),
    ])
}

fn table_statement(name: &str, statement: &str, t: Sample, d: Dialect, sql: String) -> Json {
    obj([
        ("name", s(name)),
        ("statement", s(statement)),
        ("dialect", dialect(d)),
        ("table", t.json()),
        ("sql", s(&sql)),
    ])
}

fn statements() -> Json {
    let full = [
        Op::Set("state", "SUBMITTED"),
        Op::SetSql("attempts", r#""attempts" + 1"#),
        Op::Set("provider_ref", "ref"),
        Op::When("state", "SUBMITTING"),
        Op::WhenIn("kind", &["a", "b"]),
        Op::WhenSql(r#""amount_cents" > 0"#),
    ];
    let sent = [Op::Set("status", "SENT"), Op::When("status", "PENDING")];
    let schema_table = Sample { schema: Some("b\"x"), fence_column: Some("f"), ..JOBS };
    let jobs = table("invoice_jobs");
    Json::Array(vec![
        claim("claim, returning a column", JOBS, Dialect::Postgres, &["status"]),
        claim(
            "claim in a schema, another fence column, returning the fence",
            schema_table,
            Dialect::Sqlite,
            &[],
        ),
        write_statement(
            "write: every kind of assignment and condition",
            PAYOUTS,
            Dialect::Postgres,
            &full,
            &["state"],
        ),
        write_statement("write: no assignment, no condition", PAYOUTS, Dialect::Sqlite, &[], &[]),
        write_statement(
            "write: IN an empty list",
            PAYOUTS,
            Dialect::Sqlite,
            &[Op::WhenIn("state", &[])],
            &[],
        ),
        write_statement("write", JOBS, Dialect::Postgres, &sent, &[]),
        write_statement("write returning", JOBS, Dialect::Postgres, &sent, &["status"]),
        table_statement(
            "add_fence_column",
            "add_fence_column",
            jobs,
            Dialect::Postgres,
            sql::add_fence_column(&jobs.build(), Dialect::Postgres).unwrap(),
        ),
        table_statement(
            "add_fence_column",
            "add_fence_column",
            jobs,
            Dialect::Sqlite,
            sql::add_fence_column(&jobs.build(), Dialect::Sqlite).unwrap(),
        ),
        table_statement(
            "the schema step on PostgreSQL",
            "add_fence_column_if_absent",
            table("t"),
            Dialect::Postgres,
            sql::add_fence_column_if_absent(&table("t").build()).unwrap(),
        ),
        table_statement(
            "the fence read after a refusal",
            "fence_of",
            jobs,
            Dialect::Postgres,
            sql::fence_of(&jobs.build(), Dialect::Postgres).unwrap(),
        ),
        obj([
            ("name", s("SQLite: the first name that is no column")),
            ("statement", s("unknown_column")),
            ("dialect", dialect(Dialect::Sqlite)),
            ("table", jobs.json()),
            ("names", strs(["a", "b"])),
            ("sql", s(&sql::unknown_column(2))),
        ]),
        obj([
            ("name", s("SQLite: whether the table has the fence column (table, schema, column)")),
            ("statement", s("fence_column_present")),
            ("dialect", dialect(Dialect::Sqlite)),
            ("sql", s(sql::FENCE_COLUMN_PRESENT)),
        ]),
    ])
}

fn identifiers() -> Json {
    let quoted = ["invoices", "Last Fence", r#"a"b"#, r#"x"; DROP TABLE t; --"#, "ünïcödé"]
        .map(|name| obj([("name", s(name)), ("quoted", s(&quote(name).unwrap()))]));
    let lists = [["a", "b\"c"]]
        .map(|names| obj([("names", strs(names)), ("quoted", s(&quote_list(&names).unwrap()))]));
    let long = "x".repeat(MAX_IDENTIFIER_BYTES + 1);
    let refused = ["", "a\0b", long.as_str()].map(|name| match quote(name) {
        Err(Error::Identifier { reason, .. }) => obj([("name", s(name)), ("reason", s(reason))]),
        other => panic!("{name:?} is refused: {other:?}"),
    });
    obj([
        ("max_identifier_bytes", Json::from(MAX_IDENTIFIER_BYTES)),
        ("quoted", Json::Array(quoted.into())),
        ("quoted_lists", Json::Array(lists.into())),
        ("refused", Json::Array(refused.into())),
    ])
}

fn resources() -> Json {
    let samples = [
        table("invoices"),
        Sample { schema: Some("billing"), ..table("invoices") },
        Sample { schema: Some("billing"), resource_label: Some("ledger"), ..table("invoices") },
    ];
    Json::Array(samples.map(|t| obj([("table", t.json()), ("resource", s(&t.build().resource()))])).into())
}

/// The texts of the errors the other clients mirror, for sample fields.
fn errors() -> Json {
    let cases = [
        (
            "Stale",
            obj([("resource", s("t")), ("fence", Json::from(7)), ("last_fence", Json::from(8))]),
            Error::Stale { resource: "t".into(), fence: 7, last_fence: Some(8) },
        ),
        (
            "Stale",
            obj([("resource", s("t")), ("fence", Json::from(7)), ("last_fence", Json::Null)]),
            Error::Stale { resource: "t".into(), fence: 7, last_fence: None },
        ),
        (
            "NotFound",
            obj([("resource", s("billing.invoices"))]),
            Error::NotFound { resource: "billing.invoices".into() },
        ),
        (
            "NullFence",
            obj([("table", s("invoice_jobs")), ("column", s("last_fence"))]),
            Error::NullFence { table: "invoice_jobs".into(), column: "last_fence".into() },
        ),
        (
            "UnknownColumn",
            obj([("table", s("invoice_jobs")), ("column", s("statuss"))]),
            Error::UnknownColumn { table: "invoice_jobs".into(), column: "statuss".into() },
        ),
        ("InvalidFence", obj([("fence", Json::from(0))]), Error::InvalidFence(0)),
    ];
    Json::Array(
        cases
            .into_iter()
            .map(|(kind, fields, err)| {
                obj([("kind", s(kind)), ("fields", fields), ("text", s(&err.to_string()))])
            })
            .collect(),
    )
}

/// The whole file.
fn render() -> String {
    let contract = obj([
        ("format", Json::from(1)),
        (
            "about",
            s("The SQL contract of fencedlock-guard, rendered by the crate (guard/src/contract.rs) from the sample inputs beside each statement. Do not edit: run FENCEDLOCK_BLESS=1 cargo test -p fencedlock-guard contract"),
        ),
        (
            "parameters",
            s("Every claim and write binds the fence as parameter 1 and the row id as parameter 2, then the update's own values (values, in order) from 3 on; PostgreSQL writes $n, SQLite ?n"),
        ),
        (
            "names",
            obj([("default_fence_column", s(DEFAULT_FENCE_COLUMN)), ("default_id_column", s(DEFAULT_ID_COLUMN))]),
        ),
        ("identifiers", identifiers()),
        ("resources", resources()),
        ("statements", statements()),
        (
            "metrics",
            obj([
                ("stale_refusals_total", s(STALE_REFUSALS_TOTAL)),
                ("resource_label", s(RESOURCE)),
                ("steps", strs([Step::Claim, Step::Write].map(Step::name))),
            ]),
        ),
        ("errors", errors()),
    ]);
    let mut out = serde_json::to_string_pretty(&contract).expect("the contract renders");
    out.push('\n');
    out
}

const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/contract.json");

#[test]
fn contract_json_is_current() {
    let rendered = render();
    if std::env::var_os("FENCEDLOCK_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(PATH, &rendered).expect("write guard/contract.json");
        return;
    }
    let committed = std::fs::read_to_string(PATH).unwrap_or_default();
    assert!(
        committed == rendered,
        "guard/contract.json is stale (the guard's statements or names changed): regenerate it with\n\n    \
         FENCEDLOCK_BLESS=1 cargo test -p fencedlock-guard contract\n\n\
         and commit it; the Python guard's tests read it"
    );
}
