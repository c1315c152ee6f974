//! The demo's tables in PostgreSQL, in a schema of their own so that a run never touches
//! anything else in the database it is given.

use fencedlock_guard::postgres::{self as guard, Update};
use fencedlock_guard::{Dialect, Written};
use tokio_postgres::{Client, NoTls};

use super::{
    count, fence, fence_sql, invoices, refused, unguarded_send_sql, Claim, Guard, Invoice, LedgerError,
    Write, SEND_EXPRESSION,
};

/// The schema the demo creates (and drops first, with what is in it) for its two tables.
pub const SCHEMA: &str = "fencedlock_demo";

/// The statement a fenced send runs.
pub fn fenced_send_sql() -> Result<String, LedgerError> {
    Ok(guard::write_sql(&invoices(Dialect::Postgres), &send(), &["sent"])?)
}

fn send<'a>() -> Update<'a> {
    Update::new().set_sql("sent", SEND_EXPRESSION)
}

/// `url` without the password between `user:` and `@`, for printing.
pub fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let (authority, path) = rest.split_once('/').map_or((rest, None), |(a, p)| (a, Some(p)));
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
            format!("{user}@{host}")
        }
        None => authority.to_owned(),
    };
    match path {
        Some(path) => format!("{scheme}://{authority}/{path}"),
        None => format!("{scheme}://{authority}"),
    }
}

async fn connect(url: &str) -> Result<Client, LedgerError> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "demo: PostgreSQL connection ended");
        }
    });
    Ok(client)
}

/// Creates (or resets) the schema with one unsent invoice.
pub async fn create(url: &str, invoice: &str, amount_cents: i64) -> Result<(), LedgerError> {
    let client = connect(url).await?;
    client
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {SCHEMA} CASCADE;
             CREATE SCHEMA {SCHEMA};
             CREATE TABLE {SCHEMA}.invoices (
                 id text PRIMARY KEY,
                 amount_cents bigint NOT NULL,
                 sent integer NOT NULL DEFAULT 0
             );
             CREATE TABLE {SCHEMA}.outbox (
                 id bigserial PRIMARY KEY,
                 invoice_id text NOT NULL REFERENCES {SCHEMA}.invoices(id),
                 worker text NOT NULL,
                 fence bigint NOT NULL
             );"
        ))
        .await?;
    guard::add_fence_column(&client, &invoices(Dialect::Postgres)).await?;
    client
        .execute(
            &format!("INSERT INTO {SCHEMA}.invoices (id, amount_cents) VALUES ($1, $2)"),
            &[&invoice, &amount_cents],
        )
        .await?;
    Ok(())
}

/// One worker's connection.
pub struct Ledger {
    client: Client,
}

impl Ledger {
    pub async fn open(url: &str) -> Result<Ledger, LedgerError> {
        Ok(Ledger { client: connect(url).await? })
    }

    pub async fn invoice(&self, id: &str) -> Result<Invoice, LedgerError> {
        let row = self
            .client
            .query_one(&format!("SELECT sent, last_fence FROM {SCHEMA}.invoices WHERE id = $1"), &[&id])
            .await?;
        Ok(Invoice { sent: count(row.get::<_, i32>(0).into())?, last_fence: fence(row.get(1))? })
    }

    pub async fn send(
        &mut self,
        id: &str,
        worker: &str,
        fence: u64,
        guard: Guard,
    ) -> Result<Write, LedgerError> {
        let bound = fence_sql(fence)?;
        let tx = self.client.transaction().await?;
        let sent: i32 = match guard {
            Guard::Fenced => {
                match guard::write_returning(
                    &tx,
                    &invoices(Dialect::Postgres),
                    &id,
                    fence,
                    &send(),
                    &["sent"],
                )
                .await
                {
                    Ok(Written::Applied(row)) => row.get(0),
                    Ok(Written::PreconditionFailed) => {
                        return Err(LedgerError::Corrupt(
                            "a send refused by a precondition it does not have".into(),
                        ))
                    }
                    Err(err) => return Ok(Write::Refused { last_fence: refused(err)? }),
                }
            }
            Guard::Unguarded => {
                tx.query_one(&unguarded_send_sql(Dialect::Postgres)?, &[&bound, &id]).await?.get(0)
            }
        };
        let outbox_id: i64 = tx
            .query_one(
                &format!("INSERT INTO {SCHEMA}.outbox (invoice_id, worker, fence) VALUES ($1, $2, $3) RETURNING id"),
                &[&id, &worker, &bound],
            )
            .await?
            .get(0);
        tx.commit().await?;
        Ok(Write::Accepted { outbox_id, sent: count(sent.into())? })
    }

    pub async fn claim(&mut self, id: &str, fence: u64) -> Result<Claim, LedgerError> {
        let tx = self.client.transaction().await?;
        let outcome = match guard::claim(&tx, &invoices(Dialect::Postgres), &id, fence, &["sent"]).await {
            Ok(row) => Claim::Claimed { sent: count(row.get::<_, i32>(0).into())? },
            Err(err) => Claim::Newer { last_fence: refused(err)? },
        };
        tx.commit().await?;
        Ok(outcome)
    }

    pub async fn outbox(&self, id: &str) -> Result<Vec<(String, u64)>, LedgerError> {
        let rows = self
            .client
            .query(
                &format!("SELECT worker, fence FROM {SCHEMA}.outbox WHERE invoice_id = $1 ORDER BY id"),
                &[&id],
            )
            .await?;
        rows.iter().map(|row| Ok((row.get(0), fence(row.get(1))?))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::without_password;

    #[test]
    fn printed_urls_keep_everything_but_the_password() {
        assert_eq!(without_password("postgres://u:secret@h:5432/db?x=1"), "postgres://u@h:5432/db?x=1");
        assert_eq!(without_password("postgres://u:p@ss@h/db"), "postgres://u@h/db");
        assert_eq!(without_password("postgresql://h/db"), "postgresql://h/db");
        assert_eq!(without_password("postgres://u@h"), "postgres://u@h");
    }
}
