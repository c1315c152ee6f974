//! The contract as data: [`render`] writes every fact of this crate, and vectors computed by
//! its own functions, as the JSON committed at `protocol/contract.json`. Clients in other
//! languages (Python, Node, and Go and Java next) take their facts from that file and test
//! their code against its vectors, instead of restating the Rust by hand or reading its source.
//! A test fails when the committed file is stale; `FENCEDLOCK_BLESS=1` rewrites it. The schema
//! and the byte convention are in `protocol/CONTRACT.md`.
//!
//! Byte strings (keys, tokens, labels, the words of a request) are JSON strings when they are
//! valid UTF-8, and `{"hex": "…"}` otherwise. Integers are JSON numbers up to 2^53 − 1 (what
//! every JSON reader holds exactly) and `{"int": "<decimal>"}` beyond, so that no reader
//! rounds a fence and no integer is taken for a byte string.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::time::Duration;

use crate::command::{self, ArgKind, Command, ACL_CATEGORY, BLOCK, LABEL, PERMITS, SHARED, SHARED_PERMITS};
use crate::functions::{self, Form};
use crate::request::{Acquire, AcquireAll, Cad, Raise, Release, Renew, Request, Status};
use crate::{cause, cluster, config, epoch, key, keyspace, limits, periodic, ranking};
use crate::{LockStatus, PermitStatus, ReplyError, SemaphoreStatus};

/// The contract's format: raised when an existing field changes meaning or goes away (new
/// fields do not raise it).
pub const FORMAT: u64 = 1;

/// A JSON value, as little as the contract needs.
enum Json {
    Null,
    Bool(bool),
    Int(i128),
    Str(String),
    /// Bytes: a string when valid UTF-8, else `{"hex": …}`.
    Bytes(Vec<u8>),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

/// The largest integer written as a JSON number: above it readers in doubles lose digits.
const MAX_EXACT: i128 = (1 << 53) - 1;

/// A line of the rendered file is kept on one line when it fits this width.
const WIDTH: usize = 100;

fn str(s: &str) -> Json {
    Json::Str(s.to_owned())
}

fn int(n: impl Into<i128>) -> Json {
    Json::Int(n.into())
}

fn bytes(b: &[u8]) -> Json {
    Json::Bytes(b.to_vec())
}

fn opt_bytes(b: Option<&[u8]>) -> Json {
    b.map_or(Json::Null, bytes)
}

fn obj<const N: usize>(fields: [(&str, Json); N]) -> Json {
    Json::Obj(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

fn arr(items: impl IntoIterator<Item = Json>) -> Json {
    Json::Arr(items.into_iter().collect())
}

fn escape(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

impl Json {
    fn compact(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Int(n) if n.abs() <= MAX_EXACT => {
                let _ = write!(out, "{n}");
            }
            Json::Int(n) => {
                let _ = write!(out, "{{\"int\": \"{n}\"}}");
            }
            Json::Str(s) => escape(s, out),
            Json::Bytes(b) => match std::str::from_utf8(b) {
                Ok(s) => escape(s, out),
                Err(_) => {
                    out.push_str("{\"hex\": \"");
                    for byte in b {
                        let _ = write!(out, "{byte:02x}");
                    }
                    out.push_str("\"}");
                }
            },
            Json::Arr(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.compact(out);
                }
                out.push(']');
            }
            Json::Obj(fields) => {
                out.push('{');
                for (i, (name, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    escape(name, out);
                    out.push_str(": ");
                    value.compact(out);
                }
                out.push('}');
            }
        }
    }

    /// Indented, a value kept on one line when it fits [`WIDTH`] (diffs stay readable).
    fn pretty(&self, indent: usize, out: &mut String) {
        let mut line = String::new();
        self.compact(&mut line);
        let nested = matches!(self, Json::Arr(items) if !items.is_empty())
            || matches!(self, Json::Obj(fields) if !fields.is_empty());
        if !nested || indent + line.chars().count() <= WIDTH {
            out.push_str(&line);
            return;
        }
        let pad = "  ".repeat(indent / 2 + 1);
        let close = "  ".repeat(indent / 2);
        match self {
            Json::Arr(items) => {
                out.push_str("[\n");
                for (i, item) in items.iter().enumerate() {
                    out.push_str(&pad);
                    item.pretty(indent + 2, out);
                    out.push_str(if i + 1 < items.len() { ",\n" } else { "\n" });
                }
                out.push_str(&close);
                out.push(']');
            }
            Json::Obj(fields) => {
                out.push_str("{\n");
                for (i, (name, value)) in fields.iter().enumerate() {
                    out.push_str(&pad);
                    escape(name, out);
                    out.push_str(": ");
                    value.pretty(indent + 2, out);
                    out.push_str(if i + 1 < fields.len() { ",\n" } else { "\n" });
                }
                out.push_str(&close);
                out.push('}');
            }
            _ => out.push_str(&line),
        }
    }
}

/// The whole contract as JSON text: what `protocol/contract.json` must hold.
pub fn render() -> String {
    let contract = obj([
        ("format", int(FORMAT)),
        ("about", str("The fencedlock wire contract, generated by fencedlock-protocol (protocol/src/contract.rs); see protocol/CONTRACT.md. Do not edit: run FENCEDLOCK_BLESS=1 cargo test -p fencedlock-protocol contract_json_is_current")),
        ("bytes", str("Byte strings are JSON strings when valid UTF-8, else {\"hex\": \"<lower-case hex>\"}. Integers beyond 2^53-1 are {\"int\": \"<decimal>\"}.")),
        ("commands", arr(command::ALL.iter().map(command_json))),
        ("words", words()),
        ("limits", limits()),
        ("configs", configs()),
        ("errors", errors()),
        ("causes", causes()),
        ("keys", keys()),
        ("library", library()),
        ("periodic", periodic()),
        ("vectors", obj([
            ("keys", arr(SAMPLE_KEYS.iter().map(|key| key_vector(key)))),
            ("key_checks", key_checks()),
            ("requests", arr(requests())),
            ("status", arr(statuses())),
            ("errors", arr(error_replies())),
            ("ranking", ranking_vectors()),
        ])),
    ]);
    let mut out = String::new();
    contract.pretty(0, &mut out);
    out.push('\n');
    out
}

fn kind_name(kind: ArgKind) -> &'static str {
    match kind {
        ArgKind::Key => "key",
        ArgKind::Keys => "keys",
        ArgKind::Text => "text",
        ArgKind::Integer => "integer",
        ArgKind::Flag => "flag",
    }
}

fn arg_json(arg: &command::Arg) -> Json {
    obj([("name", str(arg.name)), ("kind", str(kind_name(arg.kind)))])
}

fn command_json(command: &Command) -> Json {
    let function = functions::function(command);
    obj([
        ("name", str(command.name)),
        ("arity", int(command.arity())),
        ("counts_keys", Json::Bool(command.counts_keys())),
        ("args", arr(command.args.iter().map(arg_json))),
        ("optional", arr(command.optional.iter().map(|group| arr(group.iter().map(arg_json))))),
        (
            "options",
            arr(command
                .options
                .iter()
                .map(|opt| obj([("word", str(opt.word)), ("value", arg_json(&opt.value))]))),
        ),
        ("internal", Json::Bool(function.is_none())),
        ("function", function.map_or(Json::Null, str)),
        ("takes_floor", Json::Bool(functions::takes_floor(command))),
        ("takes_wake", Json::Bool(functions::takes_wake(command))),
        ("summary", str(command.summary)),
    ])
}

fn words() -> Json {
    obj([
        ("block", str(BLOCK)),
        ("label", str(LABEL)),
        ("permits", str(PERMITS)),
        ("shared", str(SHARED)),
        ("shared_permits", int(SHARED_PERMITS)),
        ("acl_category", str(ACL_CATEGORY)),
        (
            "acquire_order",
            str("key token ttl_ms [LABEL label] [PERMITS n, only above 1] [SHARED] [BLOCK timeout_ms, last]"),
        ),
    ])
}

fn limits() -> Json {
    use limits::*;
    obj([
        ("max_token_len", int(MAX_TOKEN_LEN as u64)),
        ("max_label_len", int(MAX_LABEL_LEN as u64)),
        ("max_permits", int(MAX_PERMITS)),
        ("max_acquire_keys", int(MAX_ACQUIRE_KEYS as u64)),
        ("default_max_ttl_ms", int(DEFAULT_MAX_TTL_MS)),
        ("max_max_ttl_ms", int(MAX_MAX_TTL_MS)),
        ("max_block_ms", int(MAX_BLOCK_MS)),
        ("max_fence", int(MAX_FENCE)),
        ("epoch_gap", int(EPOCH_GAP)),
        ("default_reclaim_after_ms", int(DEFAULT_RECLAIM_AFTER_MS)),
        ("default_restart_grace_ms", int(DEFAULT_RESTART_GRACE_MS)),
        ("fences_per_microsecond", int(epoch::FENCES_PER_MICROSECOND)),
        ("slots", int(cluster::SLOTS)),
    ])
}

fn configs() -> Json {
    let config = |c: config::Config, default: u64, max: Option<u64>| {
        obj([
            ("name", str(c.name)),
            ("full_name", str(c.full_name)),
            ("default", int(default)),
            ("max", max.map_or(Json::Null, int)),
        ])
    };
    arr([
        config(config::MAX_TTL_MS, limits::DEFAULT_MAX_TTL_MS, Some(limits::MAX_MAX_TTL_MS)),
        config(config::RESTART_GRACE_MS, limits::DEFAULT_RESTART_GRACE_MS, None),
        config(config::RECLAIM_AFTER_MS, limits::DEFAULT_RECLAIM_AFTER_MS, None),
    ])
}

/// Stands for the value in a message rendered as a template; no message holds it otherwise.
const MARK: u64 = 918_273_645_546_372_819;

/// Whether `kind`'s message carries a number.
fn takes_value(kind: ReplyError) -> bool {
    kind.message(MARK).contains(&MARK.to_string())
}

fn errors() -> Json {
    let kinds = ReplyError::ALL.iter().map(|&kind| {
        let template = kind.message(MARK).replace(&MARK.to_string(), "{value}");
        let shared = if kind == ReplyError::PermitsMismatch {
            str(&kind.message(u64::from(SHARED_PERMITS)))
        } else {
            Json::Null
        };
        obj([
            ("name", str(&format!("{kind:?}"))),
            ("code", str(kind.code())),
            ("prefix", str(kind.prefix())),
            ("bad_request", Json::Bool(kind.is_bad_request())),
            ("takes_value", Json::Bool(takes_value(kind))),
            ("text", str(&template)),
            ("text_when_shared", shared),
        ])
    });
    obj([
        (
            "classify",
            str("split the reply at its first space into code and detail; the kind whose code equals the code and whose prefix starts the detail (WRONGTYPE: the code alone); none for any other reply"),
        ),
        ("kinds", arr(kinds)),
        ("library_wrong_floor_key", str(functions::WRONG_FLOOR_KEY)),
        ("library_wrong_wake_key", str(functions::WRONG_WAKE_KEY)),
    ])
}

fn keys() -> Json {
    obj([
        ("slots", int(cluster::SLOTS)),
        (
            "slot",
            str("CRC16-XMODEM of the hash tag (the bytes between the first '{' and the first '}' after it, when at least one byte is between) or else of the whole key, modulo 16384"),
        ),
        (
            "module_floor",
            obj([
                ("prefix", str(cluster::FLOOR_KEY_PREFIX)),
                ("pattern", str("fencedlock:floor:{SLOT_TAG}")),
                ("tag", str("SLOT_TAG: the smallest decimal number whose own slot is the key's")),
            ]),
        ),
        (
            "library_floor",
            obj([
                ("prefix", str(functions::FLOOR_KEY_PREFIX)),
                ("pattern", str("fencedlock:fn-floor:{TAG}")),
                ("tag_len", int(functions::FLOOR_TAG_LEN as u64)),
                (
                    "tag",
                    str("TAG: the one string of six ASCII digits, the first two 0-7 and the other four 0-3, whose own slot is the key's"),
                ),
            ]),
        ),
        (
            "wake",
            obj([
                ("prefix", str(functions::WAKE_KEY_PREFIX)),
                ("pattern", str("fencedlock:fn-wake:{TAG}:KEY")),
                ("ttl_ms", int(functions::WAKE_TTL_MS)),
            ]),
        ),
        (
            "record",
            obj([("prefix", str(periodic::RECORD_KEY_PREFIX)), ("pattern", str("fencedlock:last-run:{TAG}:KEY"))]),
        ),
        (
            "journal",
            obj([
                ("prefix", str(keyspace::JOURNAL_KEY_PREFIX)),
                ("pattern", str("fencedlock:elected:{TAG}:KEY")),
                ("length", int(keyspace::JOURNAL_LENGTH)),
                ("retention_ms", int(keyspace::JOURNAL_RETENTION_MS)),
                ("fields", arr([str(keyspace::JOURNAL_EPOCH), str(keyspace::JOURNAL_LABEL)])),
            ]),
        ),
        ("internal_prefixes", arr(keyspace::INTERNAL_PREFIXES.iter().map(|p| str(p)))),
        ("module_type", str(keyspace::MODULE_TYPE)),
        ("library_type", str(keyspace::LIBRARY_TYPE)),
        ("library_kind", str(keyspace::LIBRARY_KIND)),
    ])
}

/// The client's `Cause` kinds (`cause::ALL`): what a failed request means, which are retried,
/// which are outages, and the codes that name each.
fn causes() -> Json {
    let words = |list: &[&str]| arr(list.iter().map(|w| str(w)));
    obj([
        (
            "rule",
            str("a timeout, a failed connection, a failed TLS handshake and the sentinels naming no primary are told without a code; otherwise the reply's code (its first word, or the client's own error's code) names the kind, an ERR reply whose detail starts with one of err_details names NoModule, and anything else is Other"),
        ),
        (
            "kinds",
            arr(cause::ALL.iter().map(|k| {
                obj([
                    ("name", str(k.name)),
                    ("retryable", Json::Bool(k.retryable)),
                    ("outage", Json::Bool(k.outage)),
                    ("codes", words(k.codes)),
                    ("client_codes", words(k.client_codes)),
                    ("err_details", words(k.err_details)),
                ])
            })),
        ),
    ])
}

fn library() -> Json {
    let served: Vec<&Command> = command::ALL.iter().filter(|c| functions::function(c).is_some()).collect();
    let names = |pick: fn(&Command) -> bool| arr(served.iter().filter(|c| pick(c)).map(|c| str(c.name)));
    obj([
        ("name", str(functions::NAME)),
        ("version", int(functions::VERSION)),
        ("version_function", str(functions::VERSION_FUNCTION)),
        ("source", str("protocol/src/functions.lua")),
        ("source_digest", str(&format!("{:#018x}", functions::SOURCE_DIGEST))),
        ("source_sha1", str(&crate::sha1::hex(functions::LIBRARY.as_bytes()))),
        ("script", str("the source without its first line (#!lua name=…), for EVAL/EVALSHA")),
        ("script_sha1", str(functions::script_sha())),
        (
            "functions",
            Json::Obj(
                served.iter().filter_map(|c| Some((c.name.to_owned(), str(functions::function(c)?)))).collect(),
            ),
        ),
        ("takes_floor", names(|c| functions::takes_floor(c) && !c.counts_keys())),
        ("takes_wake", names(functions::takes_wake)),
        (
            "forms",
            obj([
                ("module", str("the request's words")),
                (
                    "fcall",
                    str("FCALL function numkeys keys… words-after-the-key…; keys: the lock key, its floor key if the function takes it, its wake-up list if it takes it (or for a waiter's ACQUIRE); ACQUIREALL: its keys, then the floor key of the first key"),
                ),
                ("evalsha", str("EVALSHA script_sha1 numkeys keys… function words-after-the-key…")),
            ]),
        ),
        ("max_safe_fence", int(functions::MAX_SAFE_FENCE)),
        ("fences_per_millisecond", int(functions::FENCES_PER_MILLISECOND)),
        ("max_ttl_ms", int(limits::DEFAULT_MAX_TTL_MS)),
        ("retention_ms", int(limits::DEFAULT_RECLAIM_AFTER_MS)),
    ])
}

fn periodic() -> Json {
    let script = |text: &str| obj([("text", str(text)), ("sha1", str(&crate::sha1::hex(text.as_bytes())))]);
    obj([
        ("record_key_prefix", str(periodic::RECORD_KEY_PREFIX)),
        (
            "fields",
            obj([
                ("started_ms", str(periodic::STARTED_MS)),
                ("fence", str(periodic::FENCE)),
                ("label", str(periodic::LABEL)),
                ("exit", str(periodic::EXIT)),
            ]),
        ),
        ("retention_ms", int(periodic::RECORD_RETENTION_MS)),
        ("read", script(periodic::READ)),
        ("write", script(periodic::WRITE)),
    ])
}

/// Keys the vectors derive names from: plain, hash-tagged, an empty tag, an unclosed one,
/// nested braces, binary, multi-byte UTF-8, empty and long.
const SAMPLE_KEYS: &[&[u8]] = &[
    b"lockk",
    b"invoice:inv_72",
    b"foo",
    b"{user1}.lock",
    b"{user1}.other",
    b"user1",
    b"a{}b",
    b"{}",
    b"foo{}{bar}",
    b"foo{{bar}}zap",
    b"a{b",
    b"{0}k",
    b"\xff\x00bin",
    b"\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87",
    b"\xf0\x9f\x94\x92",
    b"",
    b"job:xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx{tail}",
];

fn key_vector(key: &[u8]) -> Json {
    let slot = cluster::key_slot(key);
    obj([
        ("key", bytes(key)),
        ("slot", int(slot)),
        ("module_slot_tag", int(cluster::slot_tag(slot))),
        ("module_floor_key", bytes(&cluster::floor_key(slot))),
        ("floor_tag", bytes(&functions::floor_tag(slot))),
        ("floor_key", bytes(&functions::floor_key(key))),
        ("wake_key", bytes(&functions::wake_key(key))),
        ("record_key", bytes(&periodic::record_key(key))),
        ("journal_key", bytes(&keyspace::journal_key(key))),
        ("internal", Json::Bool(keyspace::is_internal(key))),
    ])
}

fn key_checks() -> Json {
    let samples = [
        "invoice:inv_72",
        "{user1}.lock",
        " padded ",
        "a b",
        "ключ",
        "🔒",
        "",
        "   ",
        "\u{3000}",
        "job\n",
        "\tjob",
        "a\u{7f}",
        "é\u{85}",
    ];
    arr(samples.iter().map(|sample| {
        let (problem, at) = match key::check(sample) {
            Ok(()) => (Json::Null, Json::Null),
            Err(key::KeyProblem::Empty) => (str("empty"), Json::Null),
            Err(key::KeyProblem::Blank) => (str("blank"), Json::Null),
            Err(key::KeyProblem::Control { at }) => (str("control"), int(at as u64)),
        };
        obj([
            ("key", str(sample)),
            ("ok", Json::Bool(key::check(sample).is_ok())),
            ("problem", problem),
            ("at", at),
        ])
    }))
}

/// One request vector: its fields, and its words in every form.
fn request_vector<'a, R: Request<'a>>(name: &str, request: &R, fields: Json, waiting: bool) -> Json {
    let words = request.words();
    let forms = Form::ALL.map(|form| {
        let sent: Vec<Cow<'_, [u8]>> = functions::form(form, &R::COMMAND, &words, waiting);
        (form.as_str(), arr(sent.iter().map(|w| bytes(w))))
    });
    let [module, fcall, evalsha] = forms;
    obj([
        ("name", str(name)),
        ("command", str(R::COMMAND.name)),
        ("request", fields),
        ("waiting", Json::Bool(waiting)),
        module,
        fcall,
        evalsha,
    ])
}

fn acquire_fields(a: &Acquire<'_>) -> Json {
    obj([
        ("key", bytes(a.key)),
        ("token", bytes(a.token)),
        ("ttl_ms", int(a.ttl_ms)),
        ("label", opt_bytes(a.label)),
        ("permits", int(a.permits)),
        ("shared", Json::Bool(a.shared)),
        ("block_ms", a.block_ms.map_or(Json::Null, int)),
    ])
}

fn requests() -> Vec<Json> {
    let mutex = Acquire::mutex(b"lockk", b"t0k3n", 30_000);
    let acquires: [(&str, Acquire<'_>, bool); 11] = [
        ("acquire", mutex, false),
        ("acquire with a label", Acquire { label: Some(b"node-a"), ..mutex }, false),
        ("acquire with permits", Acquire { permits: 3, ..mutex }, false),
        ("acquire with permits 1 (the mutex)", Acquire { permits: 1, ..mutex }, false),
        ("acquire shared", Acquire { shared: true, ..mutex }, false),
        ("acquire blocking", Acquire { block_ms: Some(250), ..mutex }, false),
        ("acquire as a waiter", mutex, true),
        (
            "acquire with every option, as a waiter",
            Acquire { label: Some(b"w-1"), permits: 5, block_ms: Some(0), ..mutex },
            true,
        ),
        (
            "acquire shared with a label, as a waiter",
            Acquire { label: Some(b"r"), shared: true, ..mutex },
            true,
        ),
        ("acquire a hash-tagged key", Acquire::mutex(b"{user1}.lock", b"t0k3n", 5), false),
        ("acquire a binary key with a binary token", Acquire::mutex(b"\xff\x00bin", b"\x00\xfe", 1), true),
    ];
    let mut out: Vec<Json> = acquires
        .iter()
        .map(|(name, a, waiting)| request_vector(name, a, acquire_fields(a), *waiting))
        .collect();
    let each = Acquire::mutex(b"{job}a", b"t0k3n", 30_000);
    let sets: [(&str, Vec<&[u8]>, Acquire<'_>); 5] = [
        ("acquireall", vec![b"{job}a", b"{job}b"], each),
        ("acquireall of one key", vec![b"{job}a"], each),
        (
            "acquireall with a label",
            vec![b"{job}a", b"{job}b", b"{job}c"],
            Acquire { label: Some(b"batch"), ..each },
        ),
        ("acquireall with permits", vec![b"{job}a", b"{job}b"], Acquire { permits: 2, ..each }),
        (
            "acquireall shared with a label",
            vec![b"{job}a", b"{job}b"],
            Acquire { shared: true, label: Some(b"r"), ..each },
        ),
    ];
    for (name, keys, each) in sets {
        let request = AcquireAll::new(keys, each);
        let fields = obj([
            ("keys", arr(request.keys.iter().map(|k| bytes(k)))),
            ("token", bytes(each.token)),
            ("ttl_ms", int(each.ttl_ms)),
            ("label", opt_bytes(each.label)),
            ("permits", int(each.permits)),
            ("shared", Json::Bool(each.shared)),
        ]);
        out.push(request_vector(name, &request, fields, false));
    }
    fn key_token(key: &[u8], token: &[u8]) -> Vec<(&'static str, Json)> {
        vec![("key", bytes(key)), ("token", bytes(token))]
    }
    fn with(mut fields: Vec<(&'static str, Json)>, more: Option<(&'static str, Json)>) -> Json {
        fields.extend(more);
        Json::Obj(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
    }
    let renew = Renew { key: b"lockk", token: b"t0k3n", ttl_ms: 30_000 };
    out.push(request_vector(
        "renew",
        &renew,
        with(key_token(b"lockk", b"t0k3n"), Some(("ttl_ms", int(30_000u64)))),
        false,
    ));
    for (name, key) in [("release", &b"lockk"[..]), ("release of a binary key", b"\xff\x00bin")] {
        let release = Release { key, token: b"t0k3n" };
        out.push(request_vector(name, &release, with(key_token(key, b"t0k3n"), None), false));
    }
    for (name, fence) in [("raise", 42), ("raise to the largest fence", limits::MAX_FENCE)] {
        let raise = Raise { key: b"lockk", token: b"t0k3n", fence };
        out.push(request_vector(
            name,
            &raise,
            with(key_token(b"lockk", b"t0k3n"), Some(("fence", int(fence)))),
            false,
        ));
    }
    let cad = Cad { key: b"plain", value: b"s3cret" };
    out.push(request_vector(
        "cad",
        &cad,
        obj([("key", bytes(b"plain")), ("value", bytes(b"s3cret"))]),
        false,
    ));
    for (name, key) in [("status", &b"lockk"[..]), ("status of a hash-tagged key", b"{user1}.lock")] {
        out.push(request_vector(name, &Status { key }, obj([("key", bytes(key))]), false));
    }
    out
}

/// A `STATUS` reply as a RESP array holds it: integers, and labels as bulk strings.
enum Reply {
    Nil,
    Lock([i64; 3], Option<Vec<u8>>),
    Semaphore([i64; 3], Vec<([i64; 2], Option<Vec<u8>>)>),
}

fn reply_json(reply: &Reply) -> Json {
    match reply {
        Reply::Nil => Json::Null,
        Reply::Lock(numbers, label) => {
            arr(numbers.iter().map(|&n| int(n)).chain(label.as_deref().map(bytes)))
        }
        Reply::Semaphore(head, holders) => arr(head.iter().map(|&n| int(n)).chain([arr(holders
            .iter()
            .map(|([fence, pttl], label)| arr([int(*fence), int(*pttl), opt_bytes(label.as_deref())])))])),
    }
}

fn ms(d: Duration) -> Json {
    int(d.as_millis() as u64)
}

fn permit_json(p: &PermitStatus) -> Json {
    obj([
        ("fence", int(p.fence)),
        ("remaining_ms", ms(p.remaining)),
        ("label", opt_bytes(p.label.as_deref())),
    ])
}

/// The decoded reply, or `Err(())` for a reply that breaks the contract.
fn decoded(reply: &Reply) -> Result<Json, ()> {
    match reply {
        Reply::Nil => Ok(Json::Null),
        Reply::Lock(numbers, label) => LockStatus::decode(*numbers, label.clone()).map_err(drop).map(|s| {
            obj([
                ("type", str("lock")),
                ("fence", int(s.fence)),
                ("held", Json::Bool(s.held)),
                ("remaining_ms", s.remaining.map_or(Json::Null, ms)),
                ("label", opt_bytes(s.label.as_deref())),
            ])
        }),
        Reply::Semaphore(head, holders) => {
            SemaphoreStatus::decode(*head, holders.clone()).map_err(drop).map(|s| {
                obj([
                    ("type", str("semaphore")),
                    ("fence", int(s.fence)),
                    ("permits", int(s.permits)),
                    ("shared", Json::Bool(s.is_shared())),
                    ("capacity", int(s.capacity())),
                    ("free", int(s.free())),
                    ("holders", arr(s.holders.iter().map(permit_json))),
                ])
            })
        }
    }
}

fn statuses() -> Vec<Json> {
    let lock = |s: LockStatus| {
        let (numbers, label) = s.encode();
        Reply::Lock(numbers, label.map(<[u8]>::to_vec))
    };
    let sem = |s: SemaphoreStatus| {
        let (head, holders) = s.encode();
        Reply::Semaphore(head, holders.into_iter().map(|(n, l)| (n, l.map(<[u8]>::to_vec))).collect())
    };
    let holder = |fence, left, label: Option<&[u8]>| PermitStatus {
        fence,
        remaining: Duration::from_millis(left),
        label: label.map(<[u8]>::to_vec),
    };
    let held = |label: Option<&[u8]>| LockStatus {
        fence: 7,
        held: true,
        remaining: Some(Duration::from_millis(29_500)),
        label: label.map(<[u8]>::to_vec),
    };
    let x = |n: usize| Some(vec![b'x'; n]);
    let samples: Vec<(&str, Reply)> = vec![
        ("no lock state", Reply::Nil),
        ("mutex free", lock(LockStatus { fence: 7, held: false, remaining: None, label: None })),
        ("mutex held", lock(held(None))),
        ("mutex held with a label", lock(held(Some(b"node-a")))),
        ("mutex held with a binary label", lock(held(Some(b"\xffnode")))),
        ("mutex held, no time left", lock(LockStatus { remaining: Some(Duration::ZERO), ..held(None) })),
        (
            "mutex with the largest fence",
            lock(LockStatus { fence: limits::MAX_FENCE, held: false, remaining: None, label: None }),
        ),
        ("semaphore without holders", sem(SemaphoreStatus { fence: 9, permits: 3, holders: vec![] })),
        (
            "semaphore",
            sem(SemaphoreStatus {
                fence: 9,
                permits: 3,
                holders: vec![holder(4, 10, None), holder(9, 0, Some(b"w-1"))],
            }),
        ),
        (
            "semaphore full",
            sem(SemaphoreStatus {
                fence: 12,
                permits: 2,
                holders: vec![holder(11, 100, None), holder(12, 200, None)],
            }),
        ),
        (
            "read leases (shared)",
            sem(SemaphoreStatus {
                fence: 9,
                permits: SHARED_PERMITS,
                holders: vec![holder(4, 10, None), holder(5, 3, Some(b"r-2")), holder(9, 1, None)],
            }),
        ),
        ("broken: fence 0", Reply::Lock([0, 0, -1], None)),
        ("broken: held 2", Reply::Lock([7, 2, -1], None)),
        ("broken: held without pttl", Reply::Lock([7, 1, -1], None)),
        ("broken: free with a pttl", Reply::Lock([7, 0, 5], None)),
        ("broken: free with a label", Reply::Lock([7, 0, -1], Some(b"x".to_vec()))),
        ("broken: empty label", Reply::Lock([7, 1, 5], Some(Vec::new()))),
        ("broken: label too long", Reply::Lock([7, 1, 5], x(limits::MAX_LABEL_LEN + 1))),
        (
            "broken: permits above the limit",
            Reply::Semaphore([9, 0, i64::from(limits::MAX_PERMITS) + 1], vec![]),
        ),
        ("broken: holder count", Reply::Semaphore([9, 2, 3], vec![([4, 1], None)])),
        ("broken: fences not increasing", Reply::Semaphore([9, 2, 3], vec![([5, 1], None), ([4, 1], None)])),
        ("broken: holder above the key's fence", Reply::Semaphore([9, 1, 3], vec![([10, 1], None)])),
        ("broken: holder without pttl", Reply::Semaphore([9, 1, 3], vec![([4, -1], None)])),
    ];
    samples
        .iter()
        .map(|(name, reply)| {
            let decoded = decoded(reply);
            obj([
                ("name", str(name)),
                ("reply", reply_json(reply)),
                ("valid", Json::Bool(decoded.is_ok())),
                ("decoded", decoded.unwrap_or(Json::Null)),
            ])
        })
        .collect()
}

fn error_replies() -> Vec<Json> {
    let mut texts: Vec<String> = Vec::new();
    for kind in ReplyError::ALL {
        texts.push(kind.message(0));
        if takes_value(kind) {
            texts.push(kind.message(limits::DEFAULT_MAX_TTL_MS));
        }
    }
    texts.push(ReplyError::PermitsMismatch.message(3));
    texts.extend(
        [
            "ERR unknown command 'FENCEDLOCK.ACQUIRE', with args beginning with: 'k'",
            "ERR wrong number of arguments for 'fencedlock.acquire' command",
            "NOPERM User app has no permissions to run the 'fencedlock.acquire' command",
            "TRYAGAIN Multiple keys request during rehashing of slot",
            "NOSCRIPT No matching script. Please use EVAL.",
            "WRONGTYPE anything",
            "OOM command not allowed when used memory > 'maxmemory'.",
            "ERR Error running script, ttl must be a positive integer",
        ]
        .map(str::to_owned),
    );
    texts.push(format!(
        "{}{}",
        functions::WRONG_FLOOR_KEY,
        String::from_utf8_lossy(&functions::floor_key(b"k"))
    ));
    texts
        .iter()
        .map(|text| {
            let (code, detail) = text.split_once(' ').unwrap_or((text, ""));
            let kind = ReplyError::classify(code, detail);
            obj([
                ("reply", str(text)),
                ("code", str(code)),
                ("detail", str(detail)),
                ("kind", kind.map_or(Json::Null, |k| str(&format!("{k:?}")))),
            ])
        })
        .collect()
}

/// Redlock's designated master (`ranking`): for a key and the masters' addresses in a given
/// order, each address's score and the addresses' indexes in the order waiters try them.
fn ranking_vectors() -> Json {
    const CASES: [(&str, &[&str]); 6] = [
        ("invoice:42", &["127.0.0.1:6379"]),
        ("", &[""]),
        ("k", &["127.0.0.1:6379", "127.0.0.1:6380"]),
        ("invoice:42", &["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"]),
        ("invoice:42", &["127.0.0.1:7003", "127.0.0.1:7002", "127.0.0.1:7001"]),
        ("{orders}:é", &["redis-a:6379", "redis-b:6379", "redis-c:6379", "redis-d:6379", "redis-e:6379"]),
    ];
    let cases = CASES.iter().map(|(key, names)| {
        obj([
            ("key", str(key)),
            ("names", arr(names.iter().map(|n| str(n)))),
            ("scores", arr(names.iter().map(|n| int(ranking::score(key, n))))),
            ("order", arr(ranking::ranking(key, names.iter().copied()).into_iter().map(|i| int(i as u64)))),
        ])
    });
    arr(cases)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/contract.json");

    #[test]
    fn contract_json_is_current() {
        let rendered = render();
        if std::env::var_os("FENCEDLOCK_BLESS").is_some_and(|v| v == "1") {
            std::fs::write(PATH, &rendered).expect("write protocol/contract.json");
            return;
        }
        let committed = std::fs::read_to_string(PATH).unwrap_or_default();
        assert!(
            committed == rendered,
            "protocol/contract.json is stale (the contract changed): regenerate it with\n\n    \
             FENCEDLOCK_BLESS=1 cargo test -p fencedlock-protocol contract_json_is_current\n\n\
             and commit it; the Python and Node tests read it"
        );
    }

    #[test]
    fn strings_are_escaped_and_bytes_follow_the_convention() {
        let mut out = String::new();
        arr([str("a\"b\\c\n\u{1}é"), bytes(b"\xff\x00"), int(limits::MAX_FENCE), int(-1), Json::Null])
            .compact(&mut out);
        assert_eq!(out, r#"["a\"b\\c\n\u0001é", {"hex": "ff00"}, {"int": "9223372036854775807"}, -1, null]"#);
    }

    #[test]
    fn the_script_sha_is_what_servers_name_the_script_by() {
        // `redis-cli SCRIPT LOAD` of the periodic READ script, and the SHA-1 of its text.
        assert_eq!(crate::sha1::hex(periodic::READ.as_bytes()).len(), 40);
        assert_eq!(functions::script_sha(), crate::sha1::hex(functions::eval_script().as_bytes()));
    }

    #[test]
    fn every_vector_of_the_sample_requests_is_well_formed() {
        for request in requests() {
            let Json::Obj(fields) = request else { panic!("an object") };
            for form in Form::ALL {
                assert!(fields.iter().any(|(name, _)| name == form.as_str()), "{}", form.as_str());
            }
        }
    }
}
