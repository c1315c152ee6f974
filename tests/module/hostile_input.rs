//! Hostile input against a live server.
//!
//! - A bounded random-command run (5,000 FENCEDLOCK.* calls with random arity, random bytes,
//!   huge, negative and malformed numbers, keys of other types) on a primary with a replica:
//!   the server stays up, every reply has the shape its command promises, fences keep their
//!   order, no call hits the module's internal-error guard, and the replica ends identical.
//! - Oversized inputs: a 1 MiB key works, 513-byte and 1 MiB tokens and ttls of 2^63 and
//!   beyond are refused cleanly, the largest configurable ttl does not overflow a deadline,
//!   and an exhausted fence space fails grants instead of wrapping.
//!
//! Tampered `DUMP` payloads are covered by
//! `commands::corrupt_dump_payloads_are_refused_without_crashing`, and the module's
//! own property tests fuzz its argument parsing and record loader against the pure core.

use std::collections::HashMap;
use std::time::Duration;

use fencedlock_protocol::command::{ACQUIRE, RAISE, RELEASE, RENEW};
use fencedlock_protocol::limits::{DEFAULT_MAX_TTL_MS, MAX_FENCE, MAX_MAX_TTL_MS, MAX_TOKEN_LEN};
use harness::redis::{self, Value};
use harness::{error_text, try_decode_status, Server};
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

const CALLS: usize = 5_000;
const PING_EVERY: usize = 250;

const COMMANDS: [&str; 7] = ["ACQUIRE", "RENEW", "RELEASE", "RAISE", "STATUS", "CAD", "APPLY"];

/// The arity (arguments after the command name) each command expects.
fn arity(cmd: &str) -> usize {
    match cmd {
        "ACQUIRE" | "RENEW" | "RAISE" => 3,
        "RELEASE" | "CAD" => 2,
        "STATUS" => 1,
        _ => 4,
    }
}

/// Seed from `FENCEDLOCK_FUZZ_SEED`, else from the clock; printed so a failure can be replayed.
fn seed() -> u64 {
    let seed = std::env::var("FENCEDLOCK_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(7)
    });
    eprintln!("FENCEDLOCK_FUZZ_SEED={seed}");
    seed
}

struct Gen {
    rng: StdRng,
}

impl Gen {
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.rng.random_range(0..items.len())]
    }

    fn bytes(&mut self, max: usize) -> Vec<u8> {
        let mut b = vec![0u8; self.rng.random_range(0..=max)];
        self.rng.fill_bytes(&mut b);
        b
    }

    fn key(&mut self) -> Vec<u8> {
        match self.rng.random_range(0..20) {
            0 => self.bytes(40),
            1 => Vec::new(),
            2 => b"fz:string".to_vec(),
            3 => b"fz:list".to_vec(),
            4 => b"fz:hash".to_vec(),
            5 => vec![b'k'; 1024],
            n => format!("fz:lock:{}", n % 12).into_bytes(),
        }
    }

    fn token(&mut self) -> Vec<u8> {
        match self.rng.random_range(0..12) {
            0 => Vec::new(),
            1 => vec![b'x'; MAX_TOKEN_LEN],
            2 => vec![b'x'; MAX_TOKEN_LEN + 1],
            3 => self.bytes(64),
            4 => vec![0, 0xff, b'\n', 0],
            n => format!("tok{}", n % 3).into_bytes(),
        }
    }

    /// A ttl or fence argument. For RAISE (`valid_huge` false) valid huge values are left
    /// out: one raise to the top of the fence space ends every later grant (that path has
    /// its own test below), and the run would stop exercising grants.
    fn number(&mut self, valid_huge: bool) -> Vec<u8> {
        let n: String = match self.rng.random_range(0..24) {
            0 => self
                .pick(&["0", "-0", "-1", "+5", " 5", "5 ", "1e3", "0x10", "1.5", "", "abc", "00010"])
                .into(),
            1 if valid_huge => i64::MAX.to_string(),
            1 | 2 => i64::MIN.to_string(),
            3 => u64::MAX.to_string(),
            4 => "9223372036854775808".into(),
            5 => "340282366920938463463374607431768211456".into(),
            6 if valid_huge => self.rng.random::<i64>().to_string(),
            6 => (-self.rng.random_range(1..=i64::MAX)).to_string(),
            7 => DEFAULT_MAX_TTL_MS.to_string(),
            8 => (DEFAULT_MAX_TTL_MS + 1).to_string(),
            9 => return self.bytes(12),
            10..=15 => self.rng.random_range(1..=2_000u64).to_string(),
            _ => self.rng.random_range(1..=60_000u64).to_string(),
        };
        n.into_bytes()
    }

    /// A call: mostly the right shape with some argument swapped for junk, sometimes any arity.
    fn call(&mut self) -> (String, Vec<Vec<u8>>) {
        let cmd = COMMANDS[self.rng.random_range(0..COMMANDS.len())];
        let spelled = match self.rng.random_range(0..4) {
            0 => format!("fencedlock.{}", cmd.to_lowercase()),
            1 => format!("FencedLock.{cmd}"),
            _ => format!("FENCEDLOCK.{cmd}"),
        };
        let n = if self.rng.random_bool(0.85) { arity(cmd) } else { self.rng.random_range(0..=6) };
        let mut args = vec![spelled.into_bytes()];
        for i in 0..n {
            let junk = self.rng.random_bool(0.1);
            let arg = match (cmd, i) {
                _ if junk => self.bytes(20),
                (_, 0) => self.key(),
                ("CAD", 1) => self.token(),
                (_, 1) => self.token(),
                (_, _) => self.number(cmd != "RAISE"),
            };
            args.push(arg);
        }
        (cmd.to_string(), args)
    }
}

/// Shape check of one reply; returns the fence it carries, if any.
fn check_reply(cmd: &str, args: &[Vec<u8>], reply: &Result<Value, redis::RedisError>) -> Option<u64> {
    let shown = || {
        args.iter()
            .map(|a| {
                let s = String::from_utf8_lossy(&a[..a.len().min(24)]).into_owned();
                if a.len() > 24 {
                    format!("{s}…({} bytes)", a.len())
                } else {
                    s
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    match reply {
        Err(e) => {
            assert!(e.code().is_some(), "{}: not a server error reply: {e}", shown());
            let text = error_text(e);
            assert!(
                text.starts_with("ERR ") || text.starts_with("WRONGTYPE "),
                "{}: unexpected error {text}",
                shown()
            );
            assert!(!text.contains("internal error"), "{}: hit the module's panic guard: {text}", shown());
            None
        }
        Ok(v) => match (cmd, v) {
            ("APPLY", v) => panic!("{}: a client's APPLY was accepted: {v:?}", shown()),
            ("ACQUIRE" | "RAISE", Value::Int(f)) if *f > 0 => Some(*f as u64),
            ("ACQUIRE" | "RAISE", Value::Nil) => None,
            ("RENEW" | "RELEASE" | "CAD", Value::Int(0 | 1)) => None,
            ("STATUS", v) => match try_decode_status(v) {
                Ok(status) => status.map(|st| st.fence),
                Err(why) => panic!("{}: malformed STATUS: {why}", shown()),
            },
            (_, v) => panic!("{}: malformed reply {v:?}", shown()),
        },
    }
}

fn query(conn: &mut redis::Connection, args: &[Vec<u8>]) -> Result<Value, redis::RedisError> {
    let mut cmd = redis::Cmd::new();
    for a in args {
        cmd.arg(a.as_slice());
    }
    cmd.query(conn)
}

#[test]
fn random_commands_keep_the_server_up_and_every_reply_well_formed() {
    let seed = seed();
    let mut primary = Server::builder().arg("appendonly", "yes").start();
    let replica = primary.start_replica();
    let mut conn = primary.conn();
    let _: () = redis::cmd("SET").arg("fz:string").arg("tok0").query(&mut conn).expect("SET");
    let _: i64 = redis::cmd("RPUSH").arg("fz:list").arg("a").query(&mut conn).expect("RPUSH");
    let _: i64 = redis::cmd("HSET").arg("fz:hash").arg("f").arg("v").query(&mut conn).expect("HSET");

    let mut g = Gen { rng: StdRng::seed_from_u64(seed) };
    // Per key: the last fence a reply showed. Globally: the largest fence shown.
    let mut last: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut top = 0u64;
    let (mut grants, mut errors) = (0, 0);
    for i in 0..CALLS {
        let (cmd, args) = g.call();
        let reply = query(&mut conn, &args);
        if let Err(e) = &reply {
            assert!(
                e.code().is_some(),
                "call {i} (seed {seed}): connection-level failure {e}; server log:\n{}",
                primary.log_tail(30)
            );
            errors += 1;
        }
        if let Some(fence) = check_reply(&cmd, &args, &reply) {
            let key = args[1].clone();
            let before = last.get(&key).copied().unwrap_or(0);
            match cmd.as_str() {
                "ACQUIRE" if fence != before => {
                    assert!(
                        fence > top,
                        "call {i} (seed {seed}): new grant {fence} not above every earlier fence ({top})"
                    );
                    grants += 1;
                }
                "STATUS" => assert_eq!(
                    fence, before,
                    "call {i} (seed {seed}): STATUS fence differs from the last one issued"
                ),
                _ => assert!(
                    fence >= before,
                    "call {i} (seed {seed}): fence of a key went backwards: {before} -> {fence}"
                ),
            }
            last.insert(key, fence);
            top = top.max(fence);
        }
        if i % PING_EVERY == 0 {
            let pong: String = redis::cmd("PING").query(&mut conn).expect("PING");
            assert_eq!(pong, "PONG");
        }
    }
    eprintln!("{CALLS} random calls: {grants} new grants, {errors} error replies, top fence {top}");
    assert!(grants > 20 && errors > 100, "the run must exercise both paths (seed {seed})");

    assert!(primary.is_running(), "the server died (seed {seed}):\n{}", primary.log_tail(40));
    let log = primary.log_contents();
    for bad in ["panicked", "crashed by signal", "ASSERTION FAILED", "internal error"] {
        assert!(!log.contains(bad), "server log contains {bad:?} (seed {seed}):\n{}", primary.log_tail(40));
    }
    // Effects replicated: the replica ends identical, and the data survives a reload.
    primary.wait_caught_up(&replica);
    assert_eq!(replica.digest(), primary.digest(), "replica diverged (seed {seed})");
    assert_eq!(replica.high_water(), primary.high_water());
    let before = primary.digest();
    primary.stop();
    primary.restart();
    assert_eq!(primary.digest(), before, "the AOF replay differs (seed {seed})");
}

fn err(s: &Server, args: &[&[u8]]) -> String {
    let mut cmd = redis::Cmd::new();
    for a in args {
        cmd.arg(*a);
    }
    match s.query::<Value>(&cmd) {
        Err(e) => error_text(&e),
        Ok(v) => panic!("expected an error, got {v:?}"),
    }
}

#[test]
fn oversized_inputs_are_handled_cleanly() {
    let s = Server::start();
    // A 1 MiB key is a valid key: it locks, renews, reports and releases.
    let big_key = vec![b'K'; 1 << 20];
    let acquire = |key: &[u8], token: &[u8], ttl: &[u8]| -> Result<Value, redis::RedisError> {
        let mut cmd = redis::cmd(ACQUIRE.name);
        cmd.arg(key).arg(token).arg(ttl);
        s.query(&cmd)
    };
    let fence = match acquire(&big_key, b"t", b"30000") {
        Ok(Value::Int(f)) if f > 0 => f as u64,
        other => panic!("1 MiB key: {other:?}"),
    };
    assert_eq!(acquire(&big_key, b"u", b"30000").ok(), Some(Value::Nil));
    let status = s.lock_status(&big_key).expect("STATUS of the 1 MiB key");
    assert_eq!((status.fence, status.held), (fence, true));
    let released: i64 = s.query(redis::cmd(RELEASE.name).arg(&big_key).arg("t")).expect("RELEASE");
    assert_eq!(released, 1);

    // Tokens beyond 512 bytes, up to 1 MiB.
    for len in [MAX_TOKEN_LEN + 1, 4096, 1 << 20] {
        let token = vec![b'T'; len];
        let text = err(&s, &[ACQUIRE.name.as_bytes(), b"big:tok", &token, b"1000"]);
        assert!(text.starts_with("ERR token"), "{len}-byte token: {text}");
        assert!(text.len() < 200, "the error does not echo the token");
    }
    // ttl of 2^63 and beyond, and below zero.
    for ttl in [
        "9223372036854775808",
        "9223372036854775807",
        "18446744073709551616",
        "-9223372036854775808",
        "1000000000000000000000000",
    ] {
        let text = err(&s, &[ACQUIRE.name.as_bytes(), b"big:ttl", b"t", ttl.as_bytes()]);
        assert!(text.starts_with("ERR ttl"), "ttl {ttl}: {text}");
    }
    let exists: i64 = s.cmd(&["EXISTS", "big:tok", "big:ttl"]).expect("EXISTS");
    assert_eq!(exists, 0, "refused calls created nothing");

    // The largest configurable ttl (2^42 ms) must not overflow the deadline: the lease is
    // held, and another token is refused.
    assert_eq!(MAX_MAX_TTL_MS, 1 << 42);
    let max: String = {
        let _: () = s
            .cmd(&["CONFIG", "SET", "fencedlock.max-ttl-ms", &MAX_MAX_TTL_MS.to_string()])
            .expect("CONFIG SET the maximum");
        let refused =
            s.cmd::<()>(&["CONFIG", "SET", "fencedlock.max-ttl-ms", &(MAX_MAX_TTL_MS + 1).to_string()]);
        assert!(refused.is_err(), "a max-ttl-ms above 2^42 is refused");
        let got: Vec<String> = s.cmd(&["CONFIG", "GET", "fencedlock.max-ttl-ms"]).expect("CONFIG GET");
        got[1].clone()
    };
    assert_eq!(max, MAX_MAX_TTL_MS.to_string());
    assert!(matches!(acquire(b"big:long", b"t", max.as_bytes()), Ok(Value::Int(_))));
    assert_eq!(acquire(b"big:long", b"u", b"1000").ok(), Some(Value::Nil), "the longest lease is held");
    let status = s.lock_status("big:long").expect("STATUS of the longest lease");
    assert!(
        status.held && status.remaining.is_some_and(|d| d > Duration::from_millis(4_398_046_000_000)),
        "{status:?}"
    );
    let renewed: i64 = s.cmd(&[RENEW.name, "big:long", "t", &max]).expect("RENEW");
    assert_eq!(renewed, 1);

    // The end of the fence space: a grant fails cleanly instead of wrapping.
    assert_eq!(MAX_FENCE, i64::MAX as u64);
    let raised: u64 =
        s.cmd(&[RAISE.name, "big:long", "t", &MAX_FENCE.to_string()]).expect("RAISE to the top");
    assert_eq!(raised, MAX_FENCE);
    let released: i64 = s.cmd(&[RELEASE.name, "big:long", "t"]).expect("RELEASE");
    assert_eq!(released, 1);
    for key in ["big:long", "big:other"] {
        let text = err(&s, &[ACQUIRE.name.as_bytes(), key.as_bytes(), b"t", b"1000"]);
        assert!(text.starts_with("ERR fence space exhausted"), "{key}: {text}");
    }
    let status = s.lock_status("big:long").expect("STATUS after the fence space ran out");
    assert_eq!((status.fence, status.held), (MAX_FENCE, false));
    let pong: String = s.cmd(&["PING"]).expect("PING");
    assert_eq!(pong, "PONG");
}
