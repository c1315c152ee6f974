//! What the library does for read-write locks beyond the contract's cases, on both forms
//! (`FCALL` and the script through `EVALSHA`): the module keeps readers from passing a writer
//! waiting in its queue; the library has no queue, so a waiting writer (an `ACQUIRE` naming the
//! wake-up list) refused by read leases marks the key until those leases end, and fresh read
//! leases are refused meanwhile (see the header of `functions.lua`). The plain mutex path
//! costs what it did.

use std::time::Duration;

use fencedlock_protocol::command::SHARED;
use fencedlock_protocol::functions::{self, LIBRARY};
use harness::redis;
use harness::{error_text, Server};

use crate::engines::{managed_with_library, managed_with_script, Library};

/// Both forms of the library on managed servers.
fn both_forms() -> Vec<(Server, Library)> {
    vec![(managed_with_library(LIBRARY), Library::Functions), managed_with_script(functions::eval_script())]
}

/// One lock key on one form of the library, called as the clients call it.
struct Key<'a> {
    server: &'a Server,
    library: &'a Library,
    key: &'static str,
}

impl Key<'_> {
    fn call<T: redis::FromRedisValue>(&self, function: &str, with_wake: bool, args: &[&str]) -> T {
        let key = self.key.as_bytes();
        let mut keys = vec![key.to_vec(), functions::floor_key(key)];
        if with_wake {
            keys.push(functions::wake_key(key));
        }
        let mut cmd = match self.library {
            Library::Functions => redis::cmd("FCALL").arg(function).take(),
            Library::Script(sha) => redis::cmd("EVALSHA").arg(sha).take(),
        };
        cmd.arg(keys.len()).arg(keys);
        if matches!(self.library, Library::Script(_)) {
            cmd.arg(function);
        }
        cmd.arg(args);
        self.server.query(&cmd).unwrap_or_else(|e| {
            panic!("{function} {} {args:?} ({}): {}", self.key, self.library.name(), error_text(&e))
        })
    }

    /// A read lease, asked once (no wake-up list: not a waiter).
    fn read(&self, token: &str, ttl_ms: u64) -> Option<u64> {
        self.call("fencedlock_acquire", false, &[token, &ttl_ms.to_string(), SHARED])
    }

    /// The write lease; `waiting`: the attempt of a waiter, which names the wake-up list.
    fn write(&self, token: &str, ttl_ms: u64, waiting: bool) -> Option<u64> {
        self.call("fencedlock_acquire", waiting, &[token, &ttl_ms.to_string()])
    }

    /// A waiter's attempt at a read lease.
    fn read_waiting(&self, token: &str, ttl_ms: u64) -> Option<u64> {
        self.call("fencedlock_acquire", true, &[token, &ttl_ms.to_string(), SHARED])
    }

    fn renew(&self, token: &str, ttl_ms: u64) -> bool {
        self.call::<i64>("fencedlock_renew", false, &[token, &ttl_ms.to_string()]) == 1
    }

    fn release(&self, token: &str) -> bool {
        self.call::<i64>("fencedlock_release", true, &[token]) == 1
    }

    /// How many wake-ups wait in the key's wake-up list.
    fn wake_ups(&self) -> i64 {
        self.server.query(redis::cmd("LLEN").arg(functions::wake_key(self.key.as_bytes()))).expect("LLEN")
    }
}

#[test]
fn a_waiting_writer_keeps_fresh_readers_out_until_it_has_written() {
    for (server, library) in both_forms() {
        let form = library.name();
        let k = Key { server: &server, library: &library, key: "rw:mark" };
        let r1 = k.read("r1", 5_000).expect("a reader");
        let r2 = k.read("r2", 5_000).expect("readers hold the key together");
        assert!(r2 > r1, "{form}");
        // A writer that does not wait is refused and leaves no mark: readers still come in.
        assert_eq!(k.write("w", 5_000, false), None, "{form}");
        let r3 = k.read("r3", 5_000).expect("no writer waits");
        // The writer waits: fresh readers are refused from now on, the holders' re-entries not.
        assert_eq!(k.write("w", 5_000, true), None, "{form}");
        assert_eq!(k.read("r4", 5_000), None, "{form}: a fresh reader passed a waiting writer");
        assert_eq!(k.read_waiting("r4", 5_000), None, "{form}");
        assert_eq!(k.read("r1", 5_000), Some(r1), "{form}: a holder's re-entry");
        // Each release of a read lease wakes the writer (one wake-up kept).
        assert!(k.release("r1") && k.release("r2"), "{form}");
        assert_eq!(k.wake_ups(), 1, "{form}");
        assert!(k.release("r3"), "{form}");
        // Nobody holds the key, but the woken writer is not back yet: readers still wait.
        assert_eq!(k.read("r4", 5_000), None, "{form}: a reader took the key the writer was woken for");
        let w = k.write("w", 5_000, false).expect("the woken writer");
        assert!(w > r3, "{form}: {w} above every reader's fence ({r3})");
        // The writer holds it; its grant ended the mark, so once it is done readers come in.
        assert_eq!(k.read_waiting("r4", 5_000), None, "{form}");
        assert!(k.release("w"), "{form}");
        let r4 = k.read("r4", 5_000).expect("the writer is done");
        assert!(r4 > w, "{form}");
    }
}

#[test]
fn the_mark_ends_with_the_read_leases_that_refused_the_writer() {
    for (server, library) in both_forms() {
        let form = library.name();
        // A writer that gave up: its mark lasts until the leases it was refused for end.
        let k = Key { server: &server, library: &library, key: "rw:gave-up" };
        k.read("r1", 300).expect("a reader");
        assert_eq!(k.write("w", 5_000, true), None, "{form}");
        assert_eq!(k.read("r2", 5_000), None, "{form}");
        std::thread::sleep(Duration::from_millis(450));
        assert!(k.read("r2", 5_000).is_some(), "{form}: the mark ended with the reader's lease");

        // Each refused attempt of the waiting writer sets the mark anew: a renewed reader's
        // lease keeps readers out as long as it lasts.
        let k = Key { server: &server, library: &library, key: "rw:refreshed" };
        k.read("r1", 300).expect("a reader");
        assert_eq!(k.write("w", 5_000, true), None, "{form}");
        assert!(k.renew("r1", 1_000), "{form}");
        assert_eq!(k.write("w", 5_000, true), None, "{form}");
        std::thread::sleep(Duration::from_millis(450));
        assert_eq!(k.read("r2", 5_000), None, "{form}: the mark outlives the first lease's end");
        // Renewals alone do not move it: only the writer's refusals do.
        assert!(k.renew("r1", 5_000), "{form}");
        std::thread::sleep(Duration::from_millis(800));
        assert!(k.read("r2", 5_000).is_some(), "{form}: the mark ended, the writer never came back");
    }
}

/// The plain mutex path (acquire, release) makes the calls it made before read-write locks:
/// the writer's mark is read with the rest of the key's state and written by nobody.
#[test]
fn the_mutex_path_costs_what_it_did() {
    for (server, library) in both_forms() {
        let form = library.name();
        let k = Key { server: &server, library: &library, key: "rw:mutex" };
        k.write("warm", 5_000, false).expect("granted");
        assert!(k.release("warm"));
        let commands = ["hmget", "hset", "hdel", "time", "pexpireat", "exists", "rpush", "info"];
        // How often each of `commands` ran, by one INFO (which counts itself next time).
        let calls = || -> Vec<u64> {
            let stats = server.info("commandstats");
            commands
                .iter()
                .map(|command| {
                    let field = format!("cmdstat_{command}");
                    stats
                        .iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case(&field))
                        .and_then(|(_, v)| v.split(',').find_map(|kv| kv.strip_prefix("calls=")))
                        .map_or(0, |n| n.parse().expect("a count"))
                })
                .collect()
        };
        let before = calls();
        let rounds = 10;
        for i in 0..rounds {
            let token = format!("t{i}");
            k.write(&token, 5_000, false).expect("granted");
            assert!(k.release(&token), "{form}");
        }
        let ran: Vec<(&str, u64)> =
            commands.into_iter().zip(calls().iter().zip(before).map(|(a, b)| a - b)).collect();
        // Per round, acquire reads the key's state and the floor's fence, release the key's
        // state; acquire writes the floor and the key, release the key. The library asked for
        // the server's facts at the warm-up; the script form asks on every grant.
        let info = u64::from(matches!(library, Library::Script(_)));
        let per_round = [3, 3, 0, 2, 2, 0, 0, info];
        let expected: Vec<(&str, u64)> = commands
            .into_iter()
            .zip(per_round.map(|n| n * rounds))
            .map(|(c, n)| (c, if c == "info" { n + 1 } else { n }))
            .collect();
        assert_eq!(ran, expected, "{form} (INFO: once more, the count before)");
        let fields: Vec<String> = server.cmd(&["HKEYS", "rw:mutex"]).expect("HKEYS");
        assert!(!fields.iter().any(|f| f.ends_with("_until")), "{form}: {fields:?}");
    }
}
