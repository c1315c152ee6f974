//! Security: ACLs scope lock users by key pattern and command, and tokens stay secret.
//!
//! - A user allowed `~lock:*` and the FENCEDLOCK commands locks `lock:a` and is refused
//!   `other:a` (NOPERM); a user without the commands is refused. Where the server has module
//!   ACL categories (Valkey 8+, Redis 7.4+), `+@fencedlock` grants them all.
//! - Tokens never show in INFO (every section), STATUS, error replies, ACL LOG, CLIENT LIST or
//!   the server log (at `loglevel debug`), nor next to a lease's public label. `MONITOR` and `SLOWLOG` show command arguments, the
//!   token included, as for any Redis command (docs/guarantees.md); a lock user with
//!   `-@all +<commands>` (or `-monitor -slowlog`) cannot run them.
//!
//! Token checks for keyspace events and every bad-input error are in
//! `commands::tokens_never_leak`.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use fencedlock_protocol::command::{self, ACL_CATEGORY};
use harness::redis::{self, Connection, RedisResult, Value};
use harness::{error_text, Server};

const PASSWORD: &str = "acl-test-password";
const LOCK_COMMANDS: &str =
    "+fencedlock.acquire +fencedlock.renew +fencedlock.release +fencedlock.raise +fencedlock.status +fencedlock.cad";

pub(crate) fn setuser(s: &Server, name: &str, rules: &str) -> RedisResult<()> {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER").arg(name).arg("reset").arg("on").arg(format!(">{PASSWORD}"));
    for r in rules.split_whitespace() {
        cmd.arg(r);
    }
    s.query(&cmd)
}

pub(crate) fn connect_as(s: &Server, user: &str) -> Connection {
    let url = format!("redis://{user}:{PASSWORD}@127.0.0.1:{}", s.port());
    let conn = redis::Client::open(url)
        .expect("url")
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("log in as {user}: {e}"));
    conn.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    conn
}

pub(crate) fn run(conn: &mut Connection, args: &[&str]) -> RedisResult<Value> {
    let mut cmd = redis::Cmd::new();
    for a in args {
        cmd.arg(*a);
    }
    cmd.query(conn)
}

pub(crate) fn noperm(conn: &mut Connection, args: &[&str]) -> String {
    match run(conn, args) {
        Err(e) => {
            let text = error_text(&e);
            assert!(text.starts_with("NOPERM"), "{args:?}: expected NOPERM, got {text}");
            text
        }
        Ok(v) => panic!("{args:?} should be refused by the ACL, got {v:?}"),
    }
}

pub(crate) fn exists(s: &Server, key: &str) -> bool {
    s.cmd::<i64>(&["EXISTS", key]).expect("EXISTS") == 1
}

/// Whether the server knows the module's ACL category.
fn has_category(s: &Server) -> bool {
    let cats: Vec<String> = s.cmd(&["ACL", "CAT"]).expect("ACL CAT");
    cats.iter().any(|c| c.eq_ignore_ascii_case("fencedlock"))
}

#[test]
fn a_user_scoped_to_lock_keys_and_lock_commands() {
    let s = Server::start();
    setuser(&s, "locker", &format!("~lock:* -@all {LOCK_COMMANDS}")).expect("ACL SETUSER locker");
    let mut c = connect_as(&s, "locker");

    let fence = match run(&mut c, &["FENCEDLOCK.ACQUIRE", "lock:a", "tok-a", "30000"]) {
        Ok(Value::Int(f)) if f > 0 => f as u64,
        other => panic!("locker could not lock lock:a: {other:?}"),
    };
    assert_eq!(run(&mut c, &["FENCEDLOCK.RENEW", "lock:a", "tok-a", "30000"]).ok(), Some(Value::Int(1)));
    assert!(matches!(run(&mut c, &["FENCEDLOCK.STATUS", "lock:a"]), Ok(Value::Array(_))));
    assert!(matches!(run(&mut c, &["FENCEDLOCK.RAISE", "lock:a", "tok-a", "5"]), Ok(Value::Int(_))));

    // Outside its key pattern: refused, and nothing is written.
    for args in [
        &["FENCEDLOCK.ACQUIRE", "other:a", "tok-a", "30000"][..],
        &["FENCEDLOCK.RENEW", "other:a", "tok-a", "30000"],
        &["FENCEDLOCK.RELEASE", "other:a", "tok-a"],
        &["FENCEDLOCK.STATUS", "other:a"],
        &["FENCEDLOCK.CAD", "other:a", "v"],
    ] {
        let text = noperm(&mut c, args);
        assert!(!text.contains("tok-a"), "token in an ACL error: {text}");
    }
    assert!(!exists(&s, "other:a"), "a refused ACQUIRE created the key");
    // Commands it was not given, on its own keys too.
    noperm(&mut c, &["GET", "lock:a"]);
    noperm(&mut c, &["DEL", "lock:a"]);
    noperm(&mut c, &["FENCEDLOCK.APPLY", "lock:a", "1", "1"]);
    noperm(&mut c, &["CONFIG", "SET", "fencedlock.max-ttl-ms", "1"]);
    assert_eq!(run(&mut c, &["FENCEDLOCK.RELEASE", "lock:a", "tok-a"]).ok(), Some(Value::Int(1)));
    let st = s.lock_status("lock:a").expect("STATUS");
    assert_eq!((st.fence, st.held), (fence.max(5), false));
}

#[test]
fn users_without_the_commands_are_refused() {
    let s = Server::start();
    // Every key, plain string commands only.
    setuser(&s, "plain", "~* -@all +get +set +ping").expect("ACL SETUSER plain");
    // Watchers may read lock state and nothing else.
    setuser(&s, "watcher", "~lock:* -@all +fencedlock.status").expect("ACL SETUSER watcher");
    let _: Option<u64> = s.cmd(&["FENCEDLOCK.ACQUIRE", "lock:w", "holder", "30000"]).expect("grant");

    let mut plain = connect_as(&s, "plain");
    for args in [
        &["FENCEDLOCK.ACQUIRE", "lock:p", "t", "30000"][..],
        &["FENCEDLOCK.RENEW", "lock:w", "holder", "30000"],
        &["FENCEDLOCK.RELEASE", "lock:w", "holder"],
        &["FENCEDLOCK.STATUS", "lock:w"],
        &["FENCEDLOCK.CAD", "lock:w", "holder"],
    ] {
        noperm(&mut plain, args);
    }
    assert!(!exists(&s, "lock:p"));

    let mut watcher = connect_as(&s, "watcher");
    assert!(matches!(run(&mut watcher, &["FENCEDLOCK.STATUS", "lock:w"]), Ok(Value::Array(_))));
    noperm(&mut watcher, &["FENCEDLOCK.ACQUIRE", "lock:x", "t", "30000"]);
    noperm(&mut watcher, &["FENCEDLOCK.RELEASE", "lock:w", "holder"]);
    assert!(s.lock_held("lock:w"), "the refused RELEASE changed nothing");
}

#[test]
fn the_fencedlock_acl_category_where_the_server_supports_it() {
    let s = Server::start();
    let release = s.release();
    let supported = release.module_acl_categories();
    assert_eq!(has_category(&s), supported, "@fencedlock on {release}");
    if !supported {
        // Redis 7.0: the module loads without its category; ACL rules name the commands.
        let err = setuser(&s, "cat", "~lock:* -@all +@fencedlock").unwrap_err();
        assert!(
            error_text(&err).contains("category") || error_text(&err).starts_with("ERR"),
            "{}",
            error_text(&err)
        );
        return;
    }
    // Each command carries the category (COMMAND INFO's ACL categories), on every server that
    // has categories. `ACL CAT fencedlock` lists them all on Redis 8 and Valkey, and none on
    // Redis 7.4, which leaves module commands out of that listing.
    for cmd in ["acquire", "renew", "release", "raise", "status", "cad"] {
        let info: Value = s.cmd(&["COMMAND", "INFO", &format!("fencedlock.{cmd}")]).expect("COMMAND INFO");
        let text = format!("{info:?}").to_ascii_lowercase();
        assert!(text.contains("@fencedlock"), "{cmd} in @fencedlock: {text}");
    }
    let mut listed: Vec<String> = s.cmd(&["ACL", "CAT", ACL_CATEGORY]).expect("ACL CAT fencedlock");
    listed.iter_mut().for_each(|name| name.make_ascii_uppercase());
    listed.sort();
    let mut every: Vec<String> = if release.acl_cat_lists_module_commands() {
        command::ALL.iter().map(|c| c.name.to_ascii_uppercase()).collect()
    } else {
        Vec::new()
    };
    every.sort();
    assert_eq!(listed, every, "ACL CAT {ACL_CATEGORY} on {release}");
    setuser(&s, "cat", "~lock:* -@all +@fencedlock").expect("ACL SETUSER with +@fencedlock");
    let mut c = connect_as(&s, "cat");
    assert!(matches!(run(&mut c, &["FENCEDLOCK.ACQUIRE", "lock:c", "t", "30000"]), Ok(Value::Int(_))));
    noperm(&mut c, &["FENCEDLOCK.ACQUIRE", "other:c", "t", "30000"]);
    noperm(&mut c, &["GET", "lock:c"]);
    // Even with the whole category, the internal record stays out of a client's reach.
    assert!(run(&mut c, &["FENCEDLOCK.APPLY", "lock:c", "99999", "99999", "intruder", "60000"]).is_err());
    assert_eq!(run(&mut c, &["FENCEDLOCK.RELEASE", "lock:c", "t"]).ok(), Some(Value::Int(1)));
}

/// Reads what a MONITOR connection prints for up to `limit`, until a line contains `needle`
/// (ignoring case).
fn monitor_until(stream: &mut BufReader<TcpStream>, needle: &str, limit: Duration) -> Option<String> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        let mut line = String::new();
        match stream.read_line(&mut line) {
            Ok(0) => return None,
            Ok(_) if line.to_ascii_lowercase().contains(&needle.to_ascii_lowercase()) => return Some(line),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => panic!("read MONITOR: {e}"),
        }
    }
    None
}

#[test]
fn tokens_stay_out_of_info_status_errors_acl_log_client_list_and_the_log() {
    const SECRET: &str = "Sup3rS3cret-token-7f3a";
    let s = Server::start();
    let _: () = s.cmd(&["CONFIG", "SET", "loglevel", "debug"]).expect("loglevel debug");
    setuser(&s, "locker", &format!("~lock:* -@all {LOCK_COMMANDS}")).expect("ACL SETUSER");
    let mut c = connect_as(&s, "locker");

    let mut seen: Vec<String> = Vec::new();
    let mut keep = |r: RedisResult<Value>| match r {
        Ok(v) => seen.push(format!("{v:?}")),
        Err(e) => seen.push(error_text(&e)),
    };
    keep(run(&mut c, &["FENCEDLOCK.ACQUIRE", "lock:s", SECRET, "30000"]));
    keep(run(&mut c, &["FENCEDLOCK.ACQUIRE", "lock:s", SECRET, "30000"]));
    keep(run(&mut c, &["FENCEDLOCK.RENEW", "lock:s", SECRET, "30000"]));
    // A label is public and shown; the token next to it stays secret, in replies and errors.
    keep(run(&mut c, &["FENCEDLOCK.ACQUIRE", "lock:s", SECRET, "30000", "LABEL", "public-leader"]));
    keep(run(&mut c, &["FENCEDLOCK.ACQUIRE", "lock:s", SECRET, "30000", "LABEL", ""]));
    keep(run(&mut c, &["FENCEDLOCK.ACQUIRE", "lock:s", SECRET, "30000", "LABEL", "a", "LABEL", "b"]));
    keep(run(&mut c, &["FENCEDLOCK.STATUS", "lock:s"]));
    keep(run(&mut c, &["FENCEDLOCK.ACQUIRE", "other:s", SECRET, "30000"]));
    keep(run(&mut c, &["FENCEDLOCK.RELEASE", "other:s", SECRET]));
    keep(run(&mut c, &["FENCEDLOCK.ACQUIRE", "lock:s", SECRET, "0"]));
    keep(run(&mut c, &["FENCEDLOCK.ACQUIRE", "lock:s", SECRET, "99999999999999"]));
    keep(run(&mut c, &["FENCEDLOCK.RAISE", "lock:s", SECRET, "-1"]));
    keep(run(&mut c, &["FENCEDLOCK.ACQUIRE", "lock:s", SECRET]));
    keep(run(&mut c, &["FENCEDLOCK.APPLY", "lock:s", "1", "1", SECRET, "1"]));
    keep(run(&mut c, &["GET", SECRET]));
    keep(run(&mut c, &["FENCEDLOCK.ACQUIRE", "lock:s", "intruder", "30000"]));
    for args in [
        &["INFO", "everything"][..],
        &["INFO", "fencedlock"],
        &["INFO", "commandstats"],
        &["ACL", "LOG"],
        &["CLIENT", "LIST"],
        &["FENCEDLOCK.STATUS", "lock:s"],
        &["DEBUG", "DIGEST-VALUE", "lock:s"],
    ] {
        seen.push(format!("{:?}", s.cmd::<Value>(args).unwrap_or_else(|e| panic!("{args:?}: {e}"))));
    }
    let acl_log: Value = s.cmd(&["ACL", "LOG"]).expect("ACL LOG");
    assert!(format!("{acl_log:?}").contains("other:s"), "the ACL LOG recorded the refusals: {acl_log:?}");
    assert_eq!(run(&mut c, &["FENCEDLOCK.RELEASE", "lock:s", SECRET]).ok(), Some(Value::Int(1)));

    assert!(seen.iter().any(|t| t.contains("public-leader")), "STATUS showed the label: {seen:?}");
    for text in &seen {
        assert!(!text.contains(SECRET) && !text.contains("Sup3rS3cret"), "token leaked: {text}");
    }
    let level: Vec<String> = s.cmd(&["CONFIG", "GET", "loglevel"]).expect("CONFIG GET loglevel");
    assert_eq!(level.get(1).map(String::as_str), Some("debug"), "the whole run logged at debug level");
    let log = s.log_contents();
    // The log records each client (as it would record anything a command leaked), so the
    // check below reads the right, live file.
    assert!(log.contains("Accepted"), "the log records client connections:\n{}", s.log_tail(20));
    assert!(log.contains("DEBUG") || log.lines().count() > 5, "the debug log was written");
    assert!(!log.contains(SECRET), "token leaked in the server log");
}

#[test]
fn monitor_and_slowlog_show_arguments_and_acls_keep_lock_users_out() {
    const SECRET: &str = "visible-to-monitor-4d2c";
    let s = Server::start();
    setuser(&s, "locker", &format!("~lock:* -@all {LOCK_COMMANDS}")).expect("ACL SETUSER locker");
    // A broad user that is denied just the two tools.
    setuser(&s, "app", "~* +@all -monitor -slowlog").expect("ACL SETUSER app");

    // As documented: MONITOR shows every command's arguments, the token included.
    let mut monitor = TcpStream::connect(("127.0.0.1", s.port())).expect("connect");
    monitor.set_read_timeout(Some(Duration::from_millis(200))).expect("timeout");
    monitor.write_all(b"MONITOR\r\n").expect("send MONITOR");
    let mut monitor = BufReader::new(monitor);
    assert!(monitor_until(&mut monitor, "OK", Duration::from_secs(5)).is_some(), "MONITOR started");
    let _: () = s.cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]).expect("slowlog everything");
    let _: Option<u64> = s.cmd(&["FENCEDLOCK.ACQUIRE", "lock:m", SECRET, "30000"]).expect("grant");
    let line = monitor_until(&mut monitor, "fencedlock.acquire", Duration::from_secs(5))
        .expect("MONITOR shows the command");
    assert!(line.contains(SECRET), "MONITOR shows the arguments, as for any command: {line}");
    let slowlog: Value = s.cmd(&["SLOWLOG", "GET", "10"]).expect("SLOWLOG GET");
    assert!(format!("{slowlog:?}").contains(SECRET), "SLOWLOG keeps the arguments: {slowlog:?}");

    // ACLs keep lock users (and any user denied them) away from both.
    for user in ["locker", "app"] {
        let mut c = connect_as(&s, user);
        noperm(&mut c, &["MONITOR"]);
        noperm(&mut c, &["SLOWLOG", "GET"]);
    }
    let mut app = connect_as(&s, "app");
    assert!(matches!(run(&mut app, &["FENCEDLOCK.RELEASE", "lock:m", SECRET]), Ok(Value::Int(1))));
}
