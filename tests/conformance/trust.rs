//! What the library must not take on trust from a caller who speaks the raw protocol (issue 30),
//! on both forms (`FCALL` and the script through `EVALSHA`):
//!
//! - A floor key or wake-up list other than the lock key's own is refused, naming the right
//!   one, and nothing is written. The issue's reproduction: a caller naming its own floor for a
//!   key the CLI uses got a second floor, and after a `DEL` its fences went below the CLI's.
//! - Two `FLUSHALL`s in one millisecond: each takes the floor, and the next grant starts a new
//!   epoch at the wall clock's ms. The library remembers what it issued and starts above it; the
//!   script form starts afresh every call and cannot, which the guarantees table
//!   (`docs/guarantees.md`) says (the last test shows it).

use std::collections::HashSet;
use std::sync::{Arc, Barrier};

use fencedlock_protocol::command::{ACQUIRE, RELEASE};
use fencedlock_protocol::functions::{self, LIBRARY};
use harness::redis::{self, Value};
use harness::{error_text, Server};

use crate::engines::{library_request, managed_with_library, managed_with_script, Keys, Library};

/// Both forms of the library on managed servers.
fn both_forms() -> Vec<(Server, Library)> {
    vec![(managed_with_library(LIBRARY), Library::Functions), managed_with_script(functions::eval_script())]
}

/// The library's request for `command` on `key` naming `floor` (and `wake`) as given, then `args`.
fn raw(library: &Library, function: &str, keys: &[&[u8]], args: &[&[u8]]) -> redis::Cmd {
    let mut cmd = match library {
        Library::Functions => redis::cmd("FCALL").arg(function).take(),
        Library::Script(sha) => redis::cmd("EVALSHA").arg(sha).take(),
    };
    cmd.arg(keys.len());
    for key in keys {
        cmd.arg(*key);
    }
    if matches!(library, Library::Script(_)) {
        cmd.arg(function);
    }
    for arg in args {
        cmd.arg(*arg);
    }
    cmd
}

/// The canonical request, as the clients send it.
fn acquire(server: &Server, library: &Library, key: &str, token: &str) -> Option<u64> {
    let args = [token.as_bytes().to_vec(), b"100000".to_vec()];
    server
        .query(&library_request(library, &ACQUIRE, key.as_bytes(), Keys::WithFloor, &args))
        .unwrap_or_else(|e| panic!("acquire {key} ({}): {}", library.name(), error_text(&e)))
}

fn release(server: &Server, library: &Library, key: &str, token: &str) -> bool {
    let args = [token.as_bytes().to_vec()];
    let released: i64 = server
        .query(&library_request(library, &RELEASE, key.as_bytes(), Keys::WithFloor, &args))
        .unwrap_or_else(|e| panic!("release {key} ({}): {}", library.name(), error_text(&e)));
    released == 1
}

/// `err`'s text must be `start` followed by `expected`.
fn names(err: &redis::RedisError, start: &str, expected: &[u8]) {
    let text = error_text(err);
    let want = format!("{start}{}", String::from_utf8_lossy(expected));
    assert_eq!(text, want);
}

fn keys_of(server: &Server) -> Vec<String> {
    let mut keys: Vec<String> = server.cmd(&["KEYS", "*"]).expect("KEYS");
    keys.sort();
    keys
}

#[test]
fn a_foreign_floor_key_is_refused_and_fences_stay_above_every_earlier_one() {
    for (server, library) in both_forms() {
        let form = library.name();
        let own_floor = b"fencedlock:fn-floor:{mix:z}";
        let canonical = functions::floor_key(b"mix:z");
        // The raw caller's first grant with its own floor: refused, naming the right one.
        let err = server
            .query::<Value>(&raw(&library, "fencedlock_acquire", &[b"mix:z", own_floor], &[b"py", b"100000"]))
            .expect_err("a floor of the caller's own naming is refused");
        names(&err, functions::WRONG_FLOOR_KEY, &canonical);
        assert!(keys_of(&server).is_empty(), "{form}: the refusal wrote nothing");

        // The CLI's grants (the canonical floor), then the raw caller's after a DEL.
        let cli = [acquire(&server, &library, "mix:z", "cli-1").expect("granted")];
        assert!(release(&server, &library, "mix:z", "cli-1"));
        let second = acquire(&server, &library, "mix:z", "cli-2").expect("granted");
        assert!(second > cli[0], "{form}");
        assert!(release(&server, &library, "mix:z", "cli-2"));
        let _: i64 = server.cmd(&["DEL", "mix:z"]).expect("DEL");
        let err = server
            .query::<Value>(&raw(&library, "fencedlock_acquire", &[b"mix:z", own_floor], &[b"py", b"100000"]))
            .expect_err("still refused");
        names(&err, functions::WRONG_FLOOR_KEY, &canonical);
        // A canonical floor of another slot is a foreign floor too.
        let other = functions::floor_key(b"another-slot");
        assert_ne!(other, canonical);
        let err = server
            .query::<Value>(&raw(&library, "fencedlock_acquire", &[b"mix:z", &other], &[b"py", b"100000"]))
            .expect_err("another slot's floor is refused");
        names(&err, functions::WRONG_FLOOR_KEY, &canonical);
        let after = acquire(&server, &library, "mix:z", "py").expect("granted with the right floor");
        assert!(after > second, "{form}: {after} after the deleted key's {second}");
        // The key now exists and remembers its floor: a foreign one is still refused by every
        // function that takes a floor, and the lease is untouched.
        for (function, args) in [
            ("fencedlock_acquire", &[&b"other"[..], b"100000"][..]),
            ("fencedlock_renew", &[b"py", b"100000"]),
            ("fencedlock_release", &[b"py"]),
            ("fencedlock_raise", &[b"py", b"9"]),
        ] {
            for floor in [&own_floor[..], &other] {
                let err = server
                    .query::<Value>(&raw(&library, function, &[b"mix:z", floor], args))
                    .expect_err("a foreign floor on a held key is refused");
                names(&err, functions::WRONG_FLOOR_KEY, &canonical);
            }
        }
        assert!(release(&server, &library, "mix:z", "py"), "{form}: the lease was untouched");
        assert_eq!(keys_of(&server), [String::from_utf8(canonical).expect("ascii"), "mix:z".into()]);
    }
}

/// The library proves a new key's floor by computing the key's slot in Lua, in chunks of bytes
/// (library version 9): keys of every length up to past two chunks of 16, hash tags among them,
/// must each be granted with their own floor, which a chunk or remainder off by one would fail.
#[test]
fn keys_of_every_length_are_granted_with_their_own_floor() {
    for (server, library) in both_forms() {
        for len in 1..=130usize {
            // Printable bytes, braces included (some keys carry a hash tag, some an unclosed one).
            let key: Vec<u8> = (0..len).map(|i| 33 + ((i * 7 + len * 13) % 94) as u8).collect();
            let floor = functions::floor_key(&key);
            let granted: Option<u64> = server
                .query(&raw(&library, "fencedlock_acquire", &[&key, &floor], &[b"t", b"100000"]))
                .unwrap_or_else(|e| {
                    panic!(
                        "{}: {:?} of {len} bytes refused: {}",
                        library.name(),
                        key_text(&key),
                        error_text(&e)
                    )
                });
            assert!(granted.is_some(), "{}: {:?} was free", library.name(), key_text(&key));
        }
    }
}

fn key_text(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}

/// A floor whose digits are the right slot's but whose name is not the floor key's shape (another
/// prefix, a suffix, doubled or missing braces, a digit more or less) is a foreign floor: the
/// library checks the whole name, not only that the tag hashes to the key's slot.
#[test]
fn a_floor_with_the_right_digits_in_the_wrong_shape_is_refused() {
    let key = b"shape:k";
    let canonical = functions::floor_key(key);
    let digits =
        String::from_utf8(canonical[functions::FLOOR_KEY_PREFIX.len()..canonical.len() - 1].to_vec())
            .expect("ascii digits");
    let shorter = &digits[..digits.len() - 1];
    let look_alikes = [
        format!("fencedlock:fn-floor:{{{digits}}}x"),
        format!("xfencedlock:fn-floor:{{{digits}}}"),
        format!("fencedlock:fn-flor:{{{digits}}}"),
        format!("fencedlock:fn-floar:{{{digits}}}"),
        format!("fencedlock:floor:{{{digits}}}"),
        format!("fencedlock:fn-floor:{{{digits}"),
        format!("fencedlock:fn-floor:{{{digits}}}}}"),
        format!("fencedlock:fn-floor:{{{{{digits}}}"),
        format!("fencedlock:fn-floor:{{{digits}0}}"),
        format!("fencedlock:fn-floor:{{{shorter}}}"),
        format!("fencedlock:fn-floor:{{{digits} }}"),
    ];
    for (server, library) in both_forms() {
        for floor in &look_alikes {
            for existing in [false, true] {
                if existing {
                    acquire(&server, &library, "shape:k", "holder").expect("granted with the right floor");
                }
                let err = server
                    .query::<Value>(&raw(
                        &library,
                        "fencedlock_acquire",
                        &[key, floor.as_bytes()],
                        &[b"t", b"100000"],
                    ))
                    .expect_err("a look-alike floor is refused");
                names(&err, functions::WRONG_FLOOR_KEY, &canonical);
                if existing {
                    assert!(release(&server, &library, "shape:k", "holder"), "the lease was untouched");
                    let _: i64 = server.cmd(&["DEL", "shape:k"]).expect("DEL");
                }
                assert!(
                    !keys_of(&server).iter().any(|k| k.as_bytes() == floor.as_bytes()),
                    "{}: the refusal of {floor} wrote it",
                    library.name()
                );
            }
        }
    }
}

#[test]
fn a_foreign_wake_up_list_is_refused_and_nothing_is_written() {
    for (server, library) in both_forms() {
        let form = library.name();
        let (floor, wake) = (functions::floor_key(b"w:k"), functions::wake_key(b"w:k"));
        acquire(&server, &library, "w:k", "holder").expect("granted");
        let before = keys_of(&server);
        let foreign: [&[u8]; 3] =
            [b"fencedlock:fn-wake:{x}:w:k", b"fencedlock:fn-wake:{x}:y", &functions::wake_key(b"y")];
        for list in foreign {
            // A waiter's acquire that names a foreign list, and a release that does.
            let err = server
                .query::<Value>(&raw(
                    &library,
                    "fencedlock_acquire",
                    &[b"w:k", &floor, list],
                    &[b"waiter", b"1000"],
                ))
                .expect_err("refused");
            names(&err, functions::WRONG_WAKE_KEY, &wake);
            let err = server
                .query::<Value>(&raw(&library, "fencedlock_release", &[b"w:k", &floor, list], &[b"holder"]))
                .expect_err("refused");
            names(&err, functions::WRONG_WAKE_KEY, &wake);
        }
        assert_eq!(keys_of(&server), before, "{form}: nothing written");
        assert!(release(&server, &library, "w:k", "holder"), "{form}: the lease was untouched");
    }
}

/// `MULTI`, then `rounds` times `FLUSHALL` and a grant on `{0}k`, `EXEC`: the fences.
fn flushes_in_one_transaction(server: &Server, library: &Library, rounds: usize) -> Vec<u64> {
    let mut pipe = redis::pipe();
    pipe.atomic();
    for i in 0..rounds {
        pipe.cmd("FLUSHALL").ignore();
        let args = [format!("t{i}").into_bytes(), b"60000".to_vec()];
        pipe.add_command(library_request(library, &ACQUIRE, b"{0}k", Keys::WithFloor, &args));
    }
    let mut conn = server.conn();
    let fences: Vec<Option<u64>> =
        pipe.query(&mut conn).unwrap_or_else(|e| panic!("MULTI ({}): {}", library.name(), error_text(&e)));
    fences.into_iter().map(|f| f.expect("a flushed key is free")).collect()
}

#[test]
fn two_flushalls_in_one_millisecond_never_repeat_a_library_fence() {
    let server = managed_with_library(LIBRARY);
    let library = Library::Functions;
    // The issue's reproduction, 100 times in one transaction: every grant starts a new epoch
    // (the floor is gone), most of them within one ms of the last.
    let fences = flushes_in_one_transaction(&server, &library, 100);
    assert!(fences.windows(2).all(|w| w[1] > w[0]), "rising across FLUSHALLs: {fences:?}");

    // Concurrent clients, each flushing and granting: their commands run back to back in one
    // event-loop pass as often as not.
    const CLIENTS: usize = 4;
    const ROUNDS: usize = 50;
    let start = Arc::new(Barrier::new(CLIENTS));
    let workers: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (url, start) = (server.url(), Arc::clone(&start));
            std::thread::spawn(move || {
                let mut conn = redis::Client::open(url).expect("url").get_connection().expect("connect");
                start.wait();
                let mut fences = Vec::new();
                for i in 0..ROUNDS {
                    let _: () = redis::cmd("FLUSHALL").query(&mut conn).expect("FLUSHALL");
                    let args = [format!("c{c}-{i}").into_bytes(), b"60000".to_vec()];
                    let request =
                        library_request(&Library::Functions, &ACQUIRE, b"{0}k", Keys::WithFloor, &args);
                    // Another client's grant may hold the key until its own FLUSHALL.
                    if let Some(fence) = request.query::<Option<u64>>(&mut conn).expect("acquire") {
                        fences.push(fence);
                    }
                }
                fences
            })
        })
        .collect();
    let all: Vec<u64> = workers.into_iter().flat_map(|w| w.join().expect("client")).collect();
    let distinct: HashSet<u64> = all.iter().copied().collect();
    assert!(all.len() >= ROUNDS, "enough grants to tell: {}", all.len());
    assert_eq!(distinct.len(), all.len(), "no fence twice among {} grants", all.len());
    assert!(all.iter().all(|&f| f > *fences.last().expect("fences")), "all above the transaction's");
}

#[test]
fn on_the_script_form_two_flushalls_in_one_millisecond_can_repeat_a_fence() {
    // Not held, and the guarantees table (`docs/guarantees.md`) says so: a script keeps
    // nothing between calls, so two epochs that start in one ms (two floor deletions) start at one fence.
    let (server, library) = managed_with_script(functions::eval_script());
    let repeated = (0..20).any(|_| {
        let fences = flushes_in_one_transaction(&server, &library, 2);
        fences[0] == fences[1]
    });
    assert!(repeated, "two FLUSHALLs in one transaction gave the same fence at least once in 20 tries");
}

/// The Functions engine's page (`docs/functions.md`) states the floor key rule with a Python
/// snippet a caller can copy: it must name the keys the protocol crate names (and the library
/// takes).
#[test]
fn the_functions_pages_floor_key_snippet_names_the_protocols_keys() {
    let guide = harness::docs::page("docs/functions.md");
    let after = guide
        .split_once("`fencedlock functions --floor-key KEY` prints both")
        .expect("the rule's paragraph")
        .1;
    let block = after.split_once("```python\n").expect("the snippet").1.split_once("```").expect("its end").0;
    let snippet: String =
        block.lines().map(|l| l.strip_prefix("  ").unwrap_or(l)).collect::<Vec<_>>().join("\n");
    let keys: [&[u8]; 5] = [b"invoice:inv_72", b"lockk", b"{user1}.lock", b"a{}b", b"k\xffx"];
    let mut program = snippet;
    program.push_str("\nimport sys\nfor key in sys.argv[1:]:\n    k = bytes.fromhex(key)\n    print(floor_key(k).hex(), wake_key(k).hex())\n");
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(&program)
        .args(keys.iter().map(|k| hex(k)))
        .output()
        .expect("python3 runs (scripts/setup installs it)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let printed = String::from_utf8(out.stdout).expect("hex");
    let expected: String = keys
        .iter()
        .map(|k| format!("{} {}\n", hex(&functions::floor_key(k)), hex(&functions::wake_key(k))))
        .collect();
    assert_eq!(printed, expected);
}
