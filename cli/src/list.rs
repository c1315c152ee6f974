//! `fencedlock list [PREFIX]` (`ls`): the held locks and semaphores, with their fences,
//! holders, labels and time left, found by a bounded scan of every server (every primary of a
//! cluster) and read with `STATUS`, as `status` reads one key.

use std::time::Duration;

use fencedlock::{Engine, Error, FoundKey, Node, ReplyError, ScanLimits, SemaphoreStatus};
use futures::{stream, StreamExt};
use serde_json::json;

use crate::args::ListArgs;
use crate::diagnose::{self, Context};
use crate::error::{code, CliError};
use crate::output::Output;
use crate::servers::{self, LeaseOptions};
use crate::show::{describe, describe_semaphore, label_text, semaphore_json};

/// `STATUS` requests in flight at once per server: enough to hide the round trips, few
/// enough that a listing is no burst for the server.
const STATUS_IN_FLIGHT: usize = 16;

/// One lock key and what its server said about it.
struct Row {
    found: FoundKey,
    engine: Option<Engine>,
    status: SemaphoreStatus,
}

/// Lists the (held) lock keys of every server.
pub async fn list(args: &ListArgs, out: Output) -> Result<u8, CliError> {
    let server = &args.server;
    let options = LeaseOptions {
        ttl: Duration::from_secs(1),
        wait: Duration::ZERO,
        timeout: server.timeout,
        label: None,
    };
    let lock = servers::open(server, options)?;
    let ctx = Context::new(&args.prefix, Duration::ZERO, server);
    let limits = ScanLimits { count: args.count, max_visited: args.max_scan };
    let (mut rows, mut complete, mut visited, mut unread) = (Vec::new(), true, 0, Unread::default());
    for node in lock.nodes() {
        let scan = node.lock_keys(&args.prefix, limits).await.map_err(|e| diagnose::explain(&e, ctx))?;
        complete &= scan.complete;
        visited += scan.visited;
        unread.not_text += scan.not_text;
        for (found, status) in statuses(node, scan.keys).await {
            match status {
                Ok(Some(status)) if args.all || !status.holders.is_empty() => {
                    rows.push(Row { found, engine: node.engine(), status });
                }
                // Free (shown with --all), or gone since the scan.
                Ok(_) => {}
                // An application's hash among the Functions library's lock keys.
                Err(err) if err.reply_error() == Some(ReplyError::WrongType) => {}
                Err(err) => unread.note(&found, &err, ctx),
            }
        }
    }
    rows.sort_by(|a, b| (&a.found.key, &a.found.server).cmp(&(&b.found.key, &b.found.server)));
    let servers_shown = rows.iter().any(|row| row.found.server != rows[0].found.server);
    let text = rows.iter().map(|row| line(row, servers_shown)).collect::<Vec<_>>().join("\n");
    let locks: Vec<_> = rows.iter().map(row_json).collect();
    if !complete {
        out.warning(&format!(
            "the listing is incomplete: it stopped after the servers looked at about {visited} keys (--max-scan {}); narrow it with a PREFIX, or raise --max-scan",
            args.max_scan
        ));
    }
    unread.report(out);
    let value = json!({
        "prefix": args.prefix, "complete": complete, "visited": visited, "locks": locks,
        "unreadable": unread.count, "not_text": unread.not_text,
    });
    if rows.is_empty() {
        let what = if args.all { "lock keys" } else { "held locks" };
        let whose = if args.prefix.is_empty() { String::new() } else { format!(" under {:?}", args.prefix) };
        out.notice(&format!("no {what}{whose}"));
        if out.json {
            out.result("", value);
        }
        return Ok(code::OK);
    }
    out.result(&text, value);
    Ok(code::OK)
}

/// Every key's `STATUS`, a few at a time, in the order found.
async fn statuses(
    node: &Node,
    keys: Vec<FoundKey>,
) -> Vec<(FoundKey, Result<Option<SemaphoreStatus>, Error>)> {
    stream::iter(keys)
        .map(|found| async move {
            let status = node.semaphore_status(&found.key).await;
            (found, status)
        })
        .buffered(STATUS_IN_FLIGHT)
        .collect()
        .await
}

/// One key as text: `KEY  fence F  held  T left  label "L"`, a semaphore with a line per
/// holder; its server's address when the listing spans several.
fn line(row: &Row, with_server: bool) -> String {
    let status = &row.status;
    let state = match status.permits {
        1 => {
            let holder = status.holders.first();
            let pttl = holder.map(|h| h.remaining.as_millis() as u64);
            let label = holder.and_then(label_text);
            describe(Some(status.fence), holder.is_some(), pttl, label.as_deref())
        }
        _ => describe_semaphore(status),
    };
    let (first, rest) = state.split_once('\n').map_or((state.as_str(), None), |(a, b)| (a, Some(b)));
    let mut text = format!("{}  {first}", row.found.key);
    if with_server {
        text.push_str(&format!("  on {}", row.found.server));
    }
    if let Some(rest) = rest {
        text.push('\n');
        text.push_str(rest);
    }
    text
}

/// One key as `--json`: `status --json`'s fields of a lock or a semaphore, and its server.
fn row_json(row: &Row) -> serde_json::Value {
    let status = &row.status;
    let fields = json!({
        "key": row.found.key, "server": row.found.server, "engine": row.engine.map(Engine::as_str),
    });
    let mut value = semaphore_json(status, fields);
    if status.permits == 1 {
        let holder = status.holders.first();
        value["pttl_ms"] = json!(holder.map(|h| h.remaining.as_millis() as u64));
        value["label"] = json!(holder.and_then(label_text));
    } else {
        value["pttl_ms"] = json!(status.holders.iter().map(|h| h.remaining.as_millis() as u64).max());
        value["label"] = serde_json::Value::Null;
    }
    value
}

/// Keys the listing could not read (an ACL that denies some of them, a server that stopped
/// answering halfway), reported once with the first reason.
#[derive(Default)]
struct Unread {
    count: usize,
    first: Option<String>,
    not_text: usize,
}

impl Unread {
    fn note(&mut self, found: &FoundKey, err: &Error, ctx: Context<'_>) {
        self.count += 1;
        let ctx = Context { key: &found.key, ..ctx };
        self.first
            .get_or_insert_with(|| format!("{:?}: {}", found.key, diagnose::explain(err, ctx).one_line()));
    }

    fn report(&self, out: Output) {
        if let Some(first) = &self.first {
            out.warning(&format!(
                "{} lock key(s) could not be read and are not listed; the first: {first}",
                self.count
            ));
        }
        if self.not_text > 0 {
            out.warning(&format!("{} lock key(s) whose names are not UTF-8 are not listed", self.not_text));
        }
    }
}
