//! The table of contract cases every engine must answer as the module does.

use fencedlock_protocol::command::{ACQUIRE, CAD, RAISE, RELEASE, RENEW, STATUS};
use fencedlock_protocol::functions::MAX_SAFE_FENCE;
use fencedlock_protocol::limits::{
    DEFAULT_MAX_TTL_MS, MAX_ACQUIRE_KEYS, MAX_BLOCK_MS, MAX_FENCE, MAX_LABEL_LEN, MAX_PERMITS, MAX_TOKEN_LEN,
};

use crate::table::*;

/// The BLOCK of the busy-key case: long enough to tell a wait from a refusal.
pub const BUSY_BLOCK_MS: u64 = 300;

/// Every case, names unique.
pub fn all() -> Vec<Case> {
    let mut cases = Vec::new();
    cases.extend(happy_paths());
    cases.extend(arity());
    cases.extend(ttls());
    cases.extend(tokens());
    cases.extend(options());
    cases.extend(semaphores());
    cases.extend(read_write());
    cases.extend(sets());
    cases.extend(holders_and_expiry());
    cases.extend(raises());
    cases.extend(cad());
    cases.extend(wrong_types());
    cases.push(busy_block());
    cases
}

fn happy_paths() -> Vec<Case> {
    vec![
        Case::new(
            "happy:mutex",
            vec![
                call(STATUS, &[] as &[&str]),
                call(ACQUIRE, &["a", "2000"]),
                call(STATUS, &[] as &[&str]),
                call(RENEW, &["a", "3000"]),
                call(STATUS, &[] as &[&str]),
                call(RELEASE, &["a"]),
                call(STATUS, &[] as &[&str]),
                call(ACQUIRE, &["b", "1000"]),
                call(RELEASE, &["b"]),
                call(RELEASE, &["b"]),
            ],
        ),
        // The issue's redis-cli line: `FCALL fencedlock_acquire 1 invoice:inv_72 worker-a 2000`.
        Case::new(
            "happy:key-only",
            vec![
                call_key_only(ACQUIRE, &["worker-a", "2000"]),
                call_key_only(ACQUIRE, &["worker-b", "2000"]),
                call_key_only(RENEW, &["worker-a", "2000"]),
                call_key_only(STATUS, &[] as &[&str]),
                call_key_only(RELEASE, &["worker-a"]),
                call_key_only(ACQUIRE, &["worker-b", "2000"]),
                call_key_only(RELEASE, &["worker-b"]),
            ],
        )
        .on_key("invoice:inv_72"),
        Case::new(
            "happy:contended",
            vec![
                call(ACQUIRE, &["a", "5000"]),
                call(ACQUIRE, &["b", "5000"]),
                call(RENEW, &["b", "5000"]),
                call(RELEASE, &["b"]),
                call(STATUS, &[] as &[&str]),
            ],
        ),
        Case::new(
            "happy:re-ask-restarts-the-lease",
            vec![
                call(ACQUIRE, &["a", "1000"]),
                sleep(300),
                call(ACQUIRE, &["a", "5000"]),
                call(STATUS, &[] as &[&str]),
                call(ACQUIRE, &["a", "4000", "LABEL", "relabelled"]),
                call(STATUS, &[] as &[&str]),
                call(ACQUIRE, &["a", "4000"]),
                call(STATUS, &[] as &[&str]),
            ],
        ),
        Case::new(
            "happy:label",
            vec![
                call(ACQUIRE, &["a", "2000", "LABEL", "worker-1"]),
                call(STATUS, &[] as &[&str]),
                call(RENEW, &["a", "2000"]),
                call(STATUS, &[] as &[&str]),
                call(RELEASE, &["a"]),
                call(STATUS, &[] as &[&str]),
                call(ACQUIRE, &["b", "2000", "label", "lower-case"]),
                call(STATUS, &[] as &[&str]),
            ],
        ),
        Case::new(
            "happy:binary-bytes",
            vec![
                call(ACQUIRE, &[&b"\x00\xff\xfe tok\r\n"[..], b"2000", b"LABEL", b"\xc3\x28\x00lbl"]),
                call(STATUS, &[] as &[&str]),
                call(ACQUIRE, &[&b"\x00\xff\xfe tok\r\n"[..], b"2000"]),
                call(RENEW, &[&b"\x00\xff\xfe tok\r\n"[..], b"2000"]),
                call(RELEASE, &[&b"\x00\xff\xfe"[..]]),
                call(RELEASE, &[&b"\x00\xff\xfe tok\r\n"[..]]),
                call(STATUS, &[] as &[&str]),
            ],
        )
        .on_key(&b"conformance:bin:\xff\x00\r\nkey"[..]),
    ]
}

/// Too few and too many arguments for every command (the server's own arity text).
fn arity() -> Vec<Case> {
    let mut cases = vec![
        Case::new("arity:acquire-few", vec![call(ACQUIRE, &["a"])]),
        Case::new("arity:acquire-odd", vec![call(ACQUIRE, &["a", "1000", "LABEL"])]),
        Case::new(
            "arity:acquire-four-options",
            vec![call(ACQUIRE, &["a", "1000", "LABEL", "l", "BLOCK", "1", "PERMITS", "2", "LABEL", "m"])],
        ),
        Case::new("arity:renew-few", vec![call(RENEW, &["a"])]),
        Case::new("arity:renew-many", vec![call(RENEW, &["a", "1000", "x"])]),
        Case::new("arity:release-few", vec![call(RELEASE, &[] as &[&str])]),
        Case::new("arity:release-many", vec![call(RELEASE, &["a", "x"])]),
        Case::new("arity:raise-few", vec![call(RAISE, &["a"])]),
        Case::new("arity:raise-many", vec![call(RAISE, &["a", "5", "x"])]),
        Case::new("arity:cad-few", vec![call(CAD, &[] as &[&str])]),
        Case::new("arity:cad-many", vec![call(CAD, &["v", "x"])]),
        Case::new("arity:status-many", vec![call(STATUS, &["x"])]),
    ];
    for command in [ACQUIRE, RENEW, RELEASE, RAISE, CAD, STATUS] {
        cases.push(Case::new(format!("arity:no-key:{}", command.name), vec![call_keyless(command)]));
    }
    cases
}

fn ttls() -> Vec<Case> {
    let max = DEFAULT_MAX_TTL_MS.to_string();
    let over = (DEFAULT_MAX_TTL_MS + 1).to_string();
    let bad = [
        "0",
        "-1",
        "abc",
        "1.5",
        " 5",
        "5 ",
        "+5",
        "",
        "0x10",
        over.as_str(),
        "18446744073709551615",
        "18446744073709551616",
        "99999999999999999999",
        // Leading zeros (accepted by both engines alike). Seven seconds, not "007": a 7 ms lease
        // could expire between two servers' answers to the same step, and the case then failed
        // on a loaded machine.
        "007000",
    ];
    let mut cases: Vec<Case> = bad
        .iter()
        .enumerate()
        .map(|(i, ttl)| {
            Case::new(
                format!("ttl:bad-{i}:{ttl:?}"),
                vec![
                    call(ACQUIRE, &["a", ttl]),
                    call(ACQUIRE, &["a", "5000"]),
                    call(RENEW, &["a", ttl]),
                    call(STATUS, &[] as &[&str]),
                ],
            )
        })
        .collect();
    cases.push(Case::new(
        "ttl:at-the-max",
        vec![
            call(ACQUIRE, &["a", max.as_str()]),
            call(RENEW, &["a", max.as_str()]),
            call(RENEW, &["a", over.as_str()]),
        ],
    ));
    cases
}

fn tokens() -> Vec<Case> {
    let longest = "t".repeat(MAX_TOKEN_LEN);
    let too_long = "t".repeat(MAX_TOKEN_LEN + 1);
    let mut cases = Vec::new();
    for (name, token) in [("empty", ""), ("too-long", too_long.as_str())] {
        cases.push(Case::new(
            format!("token:{name}"),
            vec![
                call(ACQUIRE, &[token, "1000"]),
                call(ACQUIRE, &["a", "5000"]),
                call(RENEW, &[token, "1000"]),
                call(RELEASE, &[token]),
                call(RAISE, &[token, "5"]),
                // Both arguments bad: which error wins.
                call(ACQUIRE, &[token, "abc"]),
                call(RENEW, &[token, "0"]),
                call(RAISE, &[token, "0"]),
            ],
        ));
    }
    for (name, token) in [("one-byte", "x"), ("longest", longest.as_str())] {
        cases.push(Case::new(
            format!("token:{name}"),
            vec![
                call(ACQUIRE, &[token, "5000"]),
                call(RENEW, &[token, "5000"]),
                call_args(RAISE, vec![lit(token), Arg::FencePlus(1)]),
                call(RELEASE, &[token]),
            ],
        ));
    }
    cases
}

fn options() -> Vec<Case> {
    let longest_label = "l".repeat(MAX_LABEL_LEN);
    let too_long_label = "l".repeat(MAX_LABEL_LEN + 1);
    let over_block = (MAX_BLOCK_MS + 1).to_string();
    let max_block = MAX_BLOCK_MS.to_string();
    let refused: Vec<(&str, Vec<&str>)> = vec![
        ("repeated-label", vec!["LABEL", "x", "LABEL", "y"]),
        ("repeated-label-mixed-case", vec!["label", "x", "LaBeL", "y"]),
        ("repeated-block", vec!["BLOCK", "10", "BLOCK", "10"]),
        ("repeated-permits", vec!["PERMITS", "2", "PERMITS", "2"]),
        ("unknown", vec!["FOO", "1"]),
        ("unknown-after-label", vec!["LABEL", "x", "NX", "1"]),
        ("label-empty", vec!["LABEL", ""]),
        ("label-too-long", vec!["LABEL", too_long_label.as_str()]),
        ("block-negative", vec!["BLOCK", "-1"]),
        ("block-text", vec!["BLOCK", "abc"]),
        ("block-fraction", vec!["BLOCK", "1.5"]),
        ("block-over-max", vec!["BLOCK", over_block.as_str()]),
        ("permits-0", vec!["PERMITS", "0"]),
        ("permits-over-max", vec!["PERMITS", "1025"]),
        ("permits-text", vec!["PERMITS", "two"]),
        ("permits-negative", vec!["PERMITS", "-2"]),
        // A bad value and a repeat: which error wins.
        ("bad-label-then-repeat", vec!["LABEL", "", "LABEL", "x"]),
        ("repeat-then-bad-ttl-order", vec!["BLOCK", "1", "block", "x"]),
    ];
    let mut cases: Vec<Case> = refused
        .into_iter()
        .map(|(name, opts)| {
            let mut args = vec!["a", "1000"];
            args.extend(opts);
            Case::new(format!("option:{name}"), vec![call(ACQUIRE, &args), call(STATUS, &[] as &[&str])])
        })
        .collect();
    let granted: Vec<(&str, Vec<&str>)> = vec![
        ("label-longest", vec!["LABEL", longest_label.as_str()]),
        ("block-0-free-key", vec!["BLOCK", "0"]),
        ("block-max-free-key", vec!["BLOCK", max_block.as_str()]),
        ("lower-case-all", vec!["block", "10", "label", "l", "permits", "1"]),
        ("permits-1-is-a-mutex", vec!["PERMITS", "1"]),
        ("permits-max", vec!["PERMITS", "1024"]),
    ];
    cases.extend(granted.into_iter().map(|(name, opts)| {
        let mut args = vec!["a", "2000"];
        args.extend(opts);
        Case::new(format!("option:{name}"), vec![call(ACQUIRE, &args), call(STATUS, &[] as &[&str])])
    }));
    debug_assert_eq!(MAX_PERMITS, 1024);
    cases
}

fn semaphores() -> Vec<Case> {
    vec![
        Case::new(
            "semaphore:full-mismatch-release",
            vec![
                call(ACQUIRE, &["a", "5000", "PERMITS", "2", "LABEL", "first"]),
                call(ACQUIRE, &["b", "5000", "PERMITS", "2"]),
                call(STATUS, &[] as &[&str]),
                call(ACQUIRE, &["c", "5000", "PERMITS", "2"]),
                call(ACQUIRE, &["c", "5000", "PERMITS", "3"]),
                call(ACQUIRE, &["c", "5000"]),
                call(ACQUIRE, &["a", "5000", "PERMITS", "3"]),
                call(ACQUIRE, &["a", "5000", "PERMITS", "2"]),
                call(RENEW, &["b", "3000"]),
                call_args(RAISE, vec![lit("a"), Arg::FencePlus(10)]),
                call(RELEASE, &["a"]),
                call(STATUS, &[] as &[&str]),
                call(ACQUIRE, &["c", "5000", "PERMITS", "2"]),
                call(STATUS, &[] as &[&str]),
                call(RELEASE, &["b"]),
                call(RELEASE, &["c"]),
                call(STATUS, &[] as &[&str]),
                // Idle: the next grant sets the count anew.
                call(ACQUIRE, &["d", "5000"]),
                call(STATUS, &[] as &[&str]),
            ],
        ),
        Case::new(
            "semaphore:mutex-held-asked-as-semaphore",
            vec![call(ACQUIRE, &["a", "5000"]), call(ACQUIRE, &["b", "5000", "PERMITS", "2"])],
        ),
        Case::new(
            "semaphore:expiry",
            vec![
                call(ACQUIRE, &["a", "150", "PERMITS", "3"]),
                call(ACQUIRE, &["b", "5000", "PERMITS", "3"]),
                sleep(300),
                call(STATUS, &[] as &[&str]),
                call(RENEW, &["a", "1000"]),
                call(RELEASE, &["a"]),
                call(ACQUIRE, &["c", "5000", "PERMITS", "3"]),
                call(STATUS, &[] as &[&str]),
            ],
        ),
    ]
}

/// Read leases (`SHARED`) and the write lease of a read-write lock: readers together, each
/// mode refusing the other, downgrade, the refused upgrade, and the options' rules.
/// `ACQUIREALL`: every key or none, each decided as its own `ACQUIRE`; a refusal or an error
/// leaves every key as it was (the STATUS of each key after it shows so).
fn sets() -> Vec<Case> {
    const ABC: &[&str] = &[":a", ":b", ":c"];
    const AB: &[&str] = &[":a", ":b"];
    const BC: &[&str] = &[":b", ":c"];
    const CA: &[&str] = &[":c", ":a"];
    let none = &[] as &[&str];
    let status_of = |suffixes: &'static [&'static str]| -> Vec<Step> {
        suffixes.iter().map(|suffix| member(STATUS, suffix, none)).collect()
    };
    let after = |mut steps: Vec<Step>, more: Vec<Step>| {
        steps.extend(more);
        steps
    };
    vec![
        Case::of_keys(
            "multi:granted-and-re-entered",
            after(
                vec![
                    set(ABC, &["t", "5000", "LABEL", "set-1"]),
                    // The same token again (a lost reply): the same fences, the leases restarted.
                    set(ABC, &["t", "8000"]),
                    set(&[":c", ":b", ":a"], &["t", "8000"]),
                    member(RENEW, ":b", &["t", "9000"]),
                    member(RELEASE, ":a", &["t"]),
                    // One key free again, two re-entered: one new fence, above all.
                    set(ABC, &["t", "5000"]),
                ],
                status_of(ABC),
            ),
        ),
        Case::of_keys(
            "multi:one-busy-key-refuses-the-set",
            after(
                vec![
                    member(ACQUIRE, ":b", &["other", "5000"]),
                    set(ABC, &["t", "5000"]),
                    set(&[":c", ":b"], &["t", "5000"]),
                ],
                after(
                    status_of(ABC),
                    vec![
                        member(RELEASE, ":b", &["other"]),
                        set(ABC, &["t", "5000"]),
                        member(ACQUIRE, ":c", &["other", "5000"]),
                    ],
                ),
            ),
        ),
        Case::of_keys(
            "multi:readers-writers-and-semaphores",
            after(
                vec![
                    set(AB, &["r1", "5000", "SHARED"]),
                    set(AB, &["r2", "5000", "shared", "LABEL", "reader"]),
                    set(BC, &["w", "5000"]),
                    // A reader's own key without SHARED: the upgrade is refused, nothing taken.
                    set(CA, &["r1", "5000"]),
                    set(CA, &["r1", "5000", "SHARED"]),
                    // Semaphores on keys held by readers: a mismatch; on fresh keys, two permits.
                    set(BC, &["s", "5000", "PERMITS", "2"]),
                    set(&[":d", ":e"], &["s1", "5000", "PERMITS", "2"]),
                    set(&[":e", ":d"], &["s2", "5000", "PERMITS", "2"]),
                    set(&[":d", ":f"], &["s3", "5000", "PERMITS", "2"]),
                    set(&[":f", ":d"], &["s3", "5000", "PERMITS", "3"]),
                ],
                status_of(&[":a", ":b", ":c", ":d", ":e", ":f"]),
            ),
        ),
        Case::of_keys(
            "multi:downgrade-keeps-the-fences",
            after(
                vec![
                    set(AB, &["w", "5000"]),
                    set(AB, &["r", "5000", "SHARED"]),
                    set(AB, &["w", "5000", "SHARED"]),
                    set(AB, &["r", "5000", "SHARED"]),
                    set(AB, &["w", "5000"]),
                ],
                status_of(AB),
            ),
        ),
        Case::of_keys(
            "multi:expired-keys-are-taken-over",
            after(
                vec![
                    set(AB, &["old", "200"]),
                    set(BC, &["new", "5000"]),
                    sleep(300),
                    set(BC, &["new", "5000"]),
                    member(RENEW, ":a", &["old", "5000"]),
                    member(RELEASE, ":b", &["old"]),
                ],
                status_of(ABC),
            ),
        ),
        Case::of_keys(
            "multi:above-a-raised-fence",
            vec![
                member(ACQUIRE, ":a", &["t", "5000"]),
                Step::Call {
                    command: RAISE,
                    keys: crate::engines::Keys::Member(":a"),
                    args: vec![lit("t"), Arg::FencePlus(1_000)],
                    timed: None,
                },
                member(RELEASE, ":a", &["t"]),
                set(&[":b", ":a"], &["u", "5000"]),
                member(STATUS, ":a", none),
            ],
        ),
        Case::of_keys(
            "multi:bad-requests-change-nothing",
            after(
                vec![
                    set(AB, &["", "5000"]),
                    set(AB, &["t", "0"]),
                    set(AB, &["t", &(DEFAULT_MAX_TTL_MS + 1).to_string()]),
                    // It never waits: BLOCK is a syntax error once its value is good.
                    set(AB, &["t", "5000", "BLOCK", "10"]),
                    set(AB, &["t", "5000", "BLOCK", "soon"]),
                    set(AB, &["t", "5000", "PERMITS", "0"]),
                    set(AB, &["t", "5000", "SHARED", "PERMITS", "2"]),
                    set(AB, &["t", "5000", "LABEL"]),
                    set(AB, &["t", "5000", "LABEL", "x", "LABEL", "y"]),
                    set(AB, &["t", "5000", "NOPE", "1"]),
                    set(&[":a", ":a"], &["t", "5000"]),
                    set(AB, &["t"]),
                    set(&[":a"], &["t"]),
                ],
                status_of(AB),
            ),
        ),
        Case::of_keys(
            "multi:at-most-64-keys",
            vec![
                set(members(MAX_ACQUIRE_KEYS + 1), &["t", "5000"]),
                member(STATUS, ":0", none),
                set(members(MAX_ACQUIRE_KEYS), &["t", "5000"]),
                member(STATUS, ":63", none),
            ],
        ),
        Case::of_keys(
            "multi:wrong-type",
            vec![
                raw(&["SET", KEY, "x"]),
                set(&[":a", ""], &["t", "5000"]),
                member(STATUS, ":a", none),
                raw(&["DEL", KEY]),
                set(&[":a", ""], &["t", "5000"]),
            ],
        ),
    ]
}

/// The suffixes `:0` to `:{n - 1}`, for the largest sets (leaked: the table lives as long as
/// the test).
fn members(n: usize) -> &'static [&'static str] {
    let suffixes: Vec<&'static str> = (0..n).map(|i| &*format!(":{i}").leak()).collect();
    suffixes.leak()
}

fn read_write() -> Vec<Case> {
    let none = &[] as &[&str];
    let mut cases = vec![
        Case::new(
            "rw:readers-together",
            vec![
                call(ACQUIRE, &["a", "5000", "SHARED"]),
                call(ACQUIRE, &["b", "5000", "shared", "LABEL", "reader-b"]),
                call(STATUS, none),
                call(RENEW, &["a", "3000"]),
                call(STATUS, none),
                call(RELEASE, &["a"]),
                call(RELEASE, &["a"]),
                call(STATUS, none),
                call(RELEASE, &["b"]),
                // Nobody holds it: the shape of a key whose last holders read.
                call(STATUS, none),
                call(ACQUIRE, &["c", "5000"]),
                call(STATUS, none),
            ],
        ),
        Case::new(
            "rw:writer-refused-while-read",
            vec![
                call(ACQUIRE, &["a", "5000", "SHARED"]),
                call(ACQUIRE, &["w", "5000"]),
                call(ACQUIRE, &["w", "5000", "PERMITS", "1"]),
                call(ACQUIRE, &["w", "5000", "LABEL", "writer"]),
                call(STATUS, none),
            ],
        ),
        Case::new(
            "rw:reader-refused-while-written",
            vec![
                call(ACQUIRE, &["w", "5000", "LABEL", "writer"]),
                call(ACQUIRE, &["a", "5000", "SHARED"]),
                call(ACQUIRE, &["a", "5000", "SHARED", "LABEL", "reader"]),
                call(STATUS, none),
                call(RELEASE, &["a"]),
                call(RENEW, &["a", "5000"]),
            ],
        ),
        Case::new(
            "rw:downgrade-keeps-the-fence",
            vec![
                call(ACQUIRE, &["w", "5000", "LABEL", "writer"]),
                call(ACQUIRE, &["w", "8000", "SHARED"]),
                // Read now: the label stays, the ttl is the new one.
                call(STATUS, none),
                call(ACQUIRE, &["r", "5000", "SHARED"]),
                call(ACQUIRE, &["w", "4000", "SHARED", "LABEL", "reader-now"]),
                call(STATUS, none),
                call(ACQUIRE, &["w", "4000"]),
                call(ACQUIRE, &["x", "4000"]),
            ],
        ),
        Case::new(
            "rw:upgrade-refused",
            vec![
                call(ACQUIRE, &["r", "5000", "SHARED", "LABEL", "reader"]),
                call(ACQUIRE, &["r", "9000"]),
                call(ACQUIRE, &["r", "9000", "PERMITS", "1", "LABEL", "other"]),
                // Nothing changed: the same read lease, its ttl and label.
                call(STATUS, none),
                call(RELEASE, &["r"]),
                call(ACQUIRE, &["r", "5000"]),
                call(STATUS, none),
            ],
        ),
        Case::new(
            "rw:reader-re-entry",
            vec![
                call(ACQUIRE, &["r", "1000", "SHARED"]),
                call(ACQUIRE, &["s", "5000", "SHARED"]),
                sleep(300),
                call(ACQUIRE, &["r", "5000", "SHARED"]),
                call(STATUS, none),
                call(ACQUIRE, &["r", "4000", "SHARED", "LABEL", "relabelled"]),
                call(STATUS, none),
            ],
        ),
        Case::new(
            "rw:semaphore-held-asked-shared",
            vec![
                call(ACQUIRE, &["a", "5000", "PERMITS", "2"]),
                call(ACQUIRE, &["b", "5000", "SHARED"]),
                call(ACQUIRE, &["a", "5000", "SHARED"]),
                call(STATUS, none),
            ],
        ),
        Case::new(
            "rw:shared-held-asked-as-semaphore",
            vec![
                call(ACQUIRE, &["a", "5000", "SHARED"]),
                call(ACQUIRE, &["b", "5000", "PERMITS", "2"]),
                call(ACQUIRE, &["a", "5000", "PERMITS", "3"]),
                call(STATUS, none),
                // Idle again: the next grant sets the count anew, either way.
                call(RELEASE, &["a"]),
                call(ACQUIRE, &["b", "5000", "PERMITS", "2"]),
                call(STATUS, none),
                call(RELEASE, &["b"]),
                call(ACQUIRE, &["c", "5000", "SHARED"]),
                call(STATUS, none),
            ],
        ),
        Case::new(
            "rw:raise-on-shared",
            vec![
                call(ACQUIRE, &["a", "5000", "SHARED"]),
                call_args(RAISE, vec![lit("a"), Arg::FencePlus(5)]),
                call(STATUS, none),
            ],
        ),
        Case::new(
            "rw:writer-after-readers-released",
            vec![
                call(ACQUIRE, &["a", "5000", "SHARED"]),
                call(ACQUIRE, &["b", "5000", "SHARED"]),
                call(ACQUIRE, &["w", "5000"]),
                call(RELEASE, &["a"]),
                call(ACQUIRE, &["w", "5000"]),
                call(RELEASE, &["b"]),
                // Above every reader's fence.
                call(ACQUIRE, &["w", "5000"]),
                call(STATUS, none),
                call(ACQUIRE, &["a", "5000", "SHARED"]),
                call(RELEASE, &["w"]),
                call(ACQUIRE, &["a", "5000", "SHARED"]),
                call(STATUS, none),
            ],
        ),
        Case::new(
            "rw:writer-after-readers-expired",
            vec![
                call(ACQUIRE, &["a", "150", "SHARED"]),
                call(ACQUIRE, &["b", "150", "SHARED", "LABEL", "short"]),
                call(ACQUIRE, &["w", "5000"]),
                sleep(300),
                call(STATUS, none),
                call(RENEW, &["a", "5000"]),
                call(RELEASE, &["b"]),
                call(ACQUIRE, &["w", "5000"]),
                call(STATUS, none),
            ],
        ),
        Case::new(
            "rw:reader-after-writer-expired",
            vec![
                call(ACQUIRE, &["w", "150"]),
                call(ACQUIRE, &["a", "5000", "SHARED"]),
                sleep(300),
                call(ACQUIRE, &["a", "5000", "SHARED"]),
                call(ACQUIRE, &["w", "5000", "SHARED"]),
                call(STATUS, none),
            ],
        ),
        Case::new(
            "rw:key-only",
            vec![
                call_key_only(ACQUIRE, &["a", "5000", "SHARED"]),
                call_key_only(ACQUIRE, &["b", "5000", "SHARED"]),
                call_key_only(ACQUIRE, &["w", "5000"]),
                call_key_only(STATUS, none),
                call_key_only(RELEASE, &["a"]),
                call_key_only(RELEASE, &["b"]),
                call_key_only(ACQUIRE, &["w", "5000"]),
            ],
        ),
        Case::new(
            "rw:wrongtype",
            vec![
                raw(&["SET", KEY, "x"]),
                call(ACQUIRE, &["a", "1000", "SHARED"]),
                call(ACQUIRE, &["a", "1000", "SHARED", "PERMITS", "2"]),
            ],
        ),
    ];
    // The options: SHARED is a word alone, at most once, never with PERMITS; the first bad
    // word decides the error.
    let refused: Vec<(&str, Vec<&str>)> = vec![
        ("shared-then-permits", vec!["SHARED", "PERMITS", "2"]),
        ("permits-then-shared", vec!["PERMITS", "2", "SHARED"]),
        ("permits-1-then-shared", vec!["permits", "1", "shared"]),
        ("shared-twice", vec!["SHARED", "SHARED"]),
        ("shared-twice-mixed-case", vec!["SHARED", "LABEL", "l", "Shared"]),
        ("shared-with-a-value", vec!["SHARED", "5"]),
        ("shared-then-label-without-value", vec!["SHARED", "LABEL"]),
        ("shared-then-bad-permits", vec!["SHARED", "PERMITS", "0"]),
        ("bad-permits-then-shared", vec!["PERMITS", "0", "SHARED"]),
        ("shared-then-bad-label", vec!["SHARED", "LABEL", ""]),
        ("shared-then-bad-block", vec!["SHARED", "BLOCK", "x"]),
        ("all-and-permits", vec!["SHARED", "LABEL", "l", "BLOCK", "1", "PERMITS", "2"]),
        ("eight-words", vec!["SHARED", "LABEL", "l", "BLOCK", "1", "PERMITS", "2", "x"]),
    ];
    cases.extend(refused.into_iter().map(|(name, opts)| {
        let mut args = vec!["a", "1000"];
        args.extend(opts);
        Case::new(format!("rw:option:{name}"), vec![call(ACQUIRE, &args), call(STATUS, none)])
    }));
    let granted: Vec<(&str, Vec<&str>)> = vec![
        ("shared-lower-case", vec!["shared"]),
        ("shared-all-options", vec!["BLOCK", "10", "SHARED", "LABEL", "l"]),
        ("shared-last", vec!["LABEL", "l", "BLOCK", "0", "sHaReD"]),
        // A label that spells the word is a label.
        ("label-named-shared", vec!["LABEL", "SHARED"]),
        ("label-named-shared-and-shared", vec!["LABEL", "SHARED", "SHARED"]),
    ];
    cases.extend(granted.into_iter().map(|(name, opts)| {
        let mut args = vec!["a", "2000"];
        args.extend(opts);
        Case::new(format!("rw:option:{name}"), vec![call(ACQUIRE, &args), call(STATUS, none)])
    }));
    cases
}

fn holders_and_expiry() -> Vec<Case> {
    vec![
        Case::new(
            "holder:non-holder",
            vec![
                call(ACQUIRE, &["a", "5000"]),
                call(RENEW, &["b", "5000"]),
                call(RELEASE, &["b"]),
                call_args(RAISE, vec![lit("b"), Arg::FencePlus(5)]),
                call(STATUS, &[] as &[&str]),
            ],
        ),
        Case::new(
            "holder:absent-key",
            vec![
                call(RENEW, &["a", "5000"]),
                call(RELEASE, &["a"]),
                call(RAISE, &["a", "5"]),
                call(STATUS, &[] as &[&str]),
            ],
        ),
        Case::new(
            "holder:after-expiry",
            vec![
                call(ACQUIRE, &["a", "100", "LABEL", "gone"]),
                sleep(250),
                call(STATUS, &[] as &[&str]),
                call(RENEW, &["a", "5000"]),
                call(RELEASE, &["a"]),
                call_args(RAISE, vec![lit("a"), Arg::FencePlus(5)]),
                call(ACQUIRE, &["b", "5000"]),
                call(STATUS, &[] as &[&str]),
                call(ACQUIRE, &["a", "5000"]),
            ],
        ),
        Case::new(
            "holder:expired-holder-asks-again",
            vec![
                call(ACQUIRE, &["a", "100"]),
                sleep(250),
                call(ACQUIRE, &["a", "5000"]),
                call(STATUS, &[] as &[&str]),
            ],
        ),
    ]
}

fn raises() -> Vec<Case> {
    let above_max = (MAX_FENCE as u128 + 1).to_string();
    let mut cases = vec![
        Case::new(
            "raise:below-equal-above",
            vec![
                call(ACQUIRE, &["a", "5000", "LABEL", "kept"]),
                call_args(RAISE, vec![lit("a"), Arg::FencePlus(-1)]),
                call_args(RAISE, vec![lit("a"), Arg::FencePlus(0)]),
                call_args(RAISE, vec![lit("a"), Arg::FencePlus(1000)]),
                call(STATUS, &[] as &[&str]),
                call(ACQUIRE, &["a", "5000"]),
                call(RELEASE, &["a"]),
                call(ACQUIRE, &["b", "5000"]),
            ],
        ),
        Case::new(
            "raise:key-only",
            vec![
                call_key_only(ACQUIRE, &["a", "5000"]),
                Step::Call {
                    command: RAISE,
                    keys: crate::engines::Keys::KeyOnly,
                    args: vec![lit("a"), Arg::FencePlus(7)],
                    timed: None,
                },
                call_key_only(STATUS, &[] as &[&str]),
            ],
        ),
    ];
    for (i, fence) in
        ["0", "-1", "abc", "1.5", "", " 5", above_max.as_str(), "99999999999999999999"].iter().enumerate()
    {
        cases.push(Case::new(
            format!("raise:bad-{i}:{fence:?}"),
            vec![call(RAISE, &["a", fence]), call(ACQUIRE, &["a", "5000"]), call(RAISE, &["a", fence])],
        ));
    }
    // Above the Functions engine's bound (2^53): a named difference, the last step of its case.
    let above_safe = (MAX_SAFE_FENCE + 1).to_string();
    cases.push(Case::new(
        "raise:above-2^53",
        vec![call(ACQUIRE, &["a", "5000"]), call(RAISE, &["a", above_safe.as_str()])],
    ));
    cases
}

fn cad() -> Vec<Case> {
    vec![
        Case::new(
            "cad:string",
            vec![
                call(CAD, &["v"]),
                raw(&["SET", KEY, "v"]),
                call(CAD, &["w"]),
                call(CAD, &[""]),
                call(CAD, &["v"]),
                call(CAD, &["v"]),
            ],
        ),
        Case::new("cad:binary", vec![raw(&["SET", KEY, "\u{0}\u{7f}"]), call(CAD, &["\u{0}\u{7f}"])]),
        Case::new(
            "cad:on-a-lock",
            vec![call(ACQUIRE, &["a", "5000"]), call(CAD, &["a"]), call(STATUS, &[] as &[&str])],
        ),
    ]
}

/// Every command on a string and on a list key.
fn wrong_types() -> Vec<Case> {
    let mut cases = Vec::new();
    let kinds = [
        ("string", raw(&["SET", KEY, "x"])),
        ("list", raw(&["RPUSH", KEY, "x"])),
        ("hash", raw(&["HSET", KEY, "f", "v"])),
        ("set", raw(&["SADD", KEY, "x"])),
        ("zset", raw(&["ZADD", KEY, "1", "x"])),
        ("stream", raw(&["XADD", KEY, "*", "f", "v"])),
        // Applications' hashes that happen to have the library's field names: a lock's state
        // is marked by its `kind` field, so neither is read as one.
        ("hash-with-a-fence-field", raw(&["HSET", KEY, "fence", "5"])),
        (
            "hash-shaped-like-a-lock",
            raw(&["HSET", KEY, "fence", "5", "permits", "1", "holders", "not msgpack"]),
        ),
    ];
    for (kind, setup) in kinds {
        cases.push(Case::new(
            format!("wrongtype:{kind}"),
            vec![
                setup.clone(),
                call(ACQUIRE, &["a", "1000"]),
                call(ACQUIRE, &["a", "1000", "PERMITS", "2", "LABEL", "l", "BLOCK", "50"]),
                call(RENEW, &["a", "1000"]),
                call(RELEASE, &["a"]),
                call(RAISE, &["a", "5"]),
                call(STATUS, &[] as &[&str]),
                call(CAD, &["x"]),
                call_key_only(ACQUIRE, &["a", "1000"]),
            ],
        ));
        // Argument errors against a wrong key: which one wins.
        cases.push(Case::new(
            format!("wrongtype:{kind}-bad-args"),
            vec![
                setup,
                call(ACQUIRE, &["a", "0"]),
                call(ACQUIRE, &["", "1000"]),
                call(ACQUIRE, &["a", "1000", "FOO", "1"]),
                call(RENEW, &["a", "abc"]),
                call(RAISE, &["a", "0"]),
            ],
        ));
    }
    cases
}

/// The busy-key BLOCK case (see the expected differences).
pub fn busy_block() -> Case {
    let block = BUSY_BLOCK_MS.to_string();
    Case::new(
        "block:busy-key",
        vec![
            call(ACQUIRE, &["a", "5000"]),
            call_timed(ACQUIRE, &["b", "1000", "BLOCK", block.as_str()], BUSY_BLOCK_MS),
        ],
    )
}
