//! The two engines side by side: a server with the module, and a managed server (no module,
//! the default user restricted) with the Functions library loaded through that default user;
//! each contract request in both forms, and the replies reduced to what the contract fixes.
//!
//! A fence's value differs between engines (epochs start from each server's clock and rate),
//! so fences are compared by relation: equal to an earlier fence of the case, or a new one
//! above (or not above) every earlier one. A lease's pttl is compared within a tolerance.
//! Everything else (errors with their full text, nil, 0/1, shapes, labels) exactly.

use std::fmt;
use std::time::{Duration, Instant};

use fencedlock_protocol::command::{Command, ACQUIREALL, STATUS};
use fencedlock_protocol::functions;
use harness::redis::{self, Value};
use harness::{error_text, Server};

/// How far two pttls taken at nearly the same moment may differ: both servers get each step
/// within a few milliseconds of each other on an idle loopback; a loaded 2-core machine may
/// stall one of them for a while.
pub const PTTL_TOLERANCE_MS: i64 = 150;

/// Which engine served a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// `FENCEDLOCK.*` on a server with the module: the reference.
    Module,
    /// `FCALL fencedlock_*` on a managed server.
    Functions,
}

impl Side {
    /// Both, the reference first.
    pub const BOTH: [Side; 2] = [Side::Module, Side::Functions];
}

/// How many keys a Functions request names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// The lock key and, where the function takes them ([`functions::takes_floor`],
    /// [`functions::takes_wake`]), its floor key and wake-up list: what the client sends.
    WithFloor,
    /// The lock key alone (numkeys 1), as typed in redis-cli.
    KeyOnly,
    /// No key at all (numkeys 0; the module's form is the bare command name).
    None,
    /// The case's key with this suffix, as [`Keys::WithFloor`] sends it: another lock key of
    /// the case (in its slot when the case's key is a hash tag).
    Member(&'static str),
    /// `ACQUIREALL` of the case's key with each of these suffixes: `numkeys key…` on the
    /// module, the keys and then their floor key on the library.
    Set(&'static [&'static str]),
}

/// The lock keys a request of `keys` names on the case's `key`.
pub fn lock_keys(key: &[u8], keys: Keys) -> Vec<Vec<u8>> {
    let member = |suffix: &str| [key, suffix.as_bytes()].concat();
    match keys {
        Keys::WithFloor | Keys::KeyOnly => vec![key.to_vec()],
        Keys::None => Vec::new(),
        Keys::Member(suffix) => vec![member(suffix)],
        Keys::Set(suffixes) => suffixes.iter().map(|suffix| member(suffix)).collect(),
    }
}

/// A managed server with `source` loaded by the default user (`FUNCTION LOAD REPLACE`).
pub fn managed_with_library(source: &str) -> Server {
    let server = Server::builder().managed().start();
    let name: String = server
        .cmd(&["FUNCTION", "LOAD", "REPLACE", source])
        .unwrap_or_else(|e| panic!("FUNCTION LOAD by the default user: {}", error_text(&e)));
    assert_eq!(name, functions::NAME);
    server
}

/// The module's request: `FENCEDLOCK.X key args…` (no key for [`Keys::None`]; `numkeys
/// key…` for [`Keys::Set`]).
pub fn module_request(command: &Command, key: &[u8], keys: Keys, args: &[Vec<u8>]) -> redis::Cmd {
    let mut cmd = redis::cmd(command.name);
    let named = lock_keys(key, keys);
    if matches!(keys, Keys::Set(_)) {
        cmd.arg(named.len());
    }
    cmd.arg(named);
    for a in args {
        cmd.arg(&a[..]);
    }
    cmd
}

/// How the managed side serves the contract: the library through `FCALL`, or the same source
/// as a script through `EVALSHA` (the fallback where `FUNCTION` is denied).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Library {
    Functions,
    /// The script's SHA1, as `SCRIPT LOAD` replied it.
    Script(String),
}

impl Library {
    pub fn name(&self) -> &'static str {
        match self {
            Library::Functions => "functions",
            Library::Script(_) => "script",
        }
    }
}

/// A managed server whose default user may not run `FUNCTION` either, with the library's
/// script loaded by that user (`SCRIPT LOAD`).
pub fn managed_with_script(source: &str) -> (Server, Library) {
    let server = Server::builder().deny_functions().start();
    let sha: String = server
        .cmd(&["SCRIPT", "LOAD", source])
        .unwrap_or_else(|e| panic!("SCRIPT LOAD by the default user: {}", error_text(&e)));
    (server, Library::Script(sha))
}

/// The managed side's request, by the protocol's mapping: `FCALL fencedlock_x 2 key floor
/// args…` (3 keys with the wake-up list for RELEASE), or numkeys 1 (or 0) as asked; as a
/// script, `EVALSHA sha <the same keys> fencedlock_x args…`.
pub fn library_request(
    library: &Library,
    command: &Command,
    key: &[u8],
    keys: Keys,
    args: &[Vec<u8>],
) -> redis::Cmd {
    let function = functions::function(command).unwrap_or_else(|| panic!("{} has no function", command.name));
    let mut cmd = match library {
        Library::Functions => {
            let mut cmd = redis::cmd("FCALL");
            cmd.arg(function);
            cmd
        }
        Library::Script(sha) => {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(sha);
            cmd
        }
    };
    let named = lock_keys(key, keys);
    let key = named.first().map_or(key, Vec::as_slice);
    match keys {
        Keys::Set(_) => {
            let all = functions::call_keys_all(&named.iter().map(Vec::as_slice).collect::<Vec<_>>());
            cmd.arg(all.len()).arg(all);
        }
        Keys::WithFloor | Keys::Member(_) if functions::takes_wake(command) => {
            cmd.arg(3).arg(key).arg(functions::floor_key(key)).arg(functions::wake_key(key));
        }
        Keys::WithFloor | Keys::Member(_) if functions::takes_floor(command) => {
            cmd.arg(2).arg(key).arg(functions::floor_key(key));
        }
        Keys::WithFloor | Keys::Member(_) | Keys::KeyOnly => {
            cmd.arg(1).arg(key);
        }
        Keys::None => {
            cmd.arg(0);
        }
    }
    if matches!(library, Library::Script(_)) {
        cmd.arg(function);
    }
    for a in args {
        cmd.arg(&a[..]);
    }
    cmd
}

/// A fence's relation to the fences seen earlier in the same case on the same side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rel {
    /// Equal to the `n`-th distinct fence of the case.
    Same(usize),
    /// The `n`-th distinct fence, above every earlier one (or, `false`, not).
    New(usize, bool),
}

/// The fences one side replied in one case, in order.
#[derive(Debug, Default)]
pub struct Fences {
    seen: Vec<i64>,
}

impl Fences {
    fn relate(&mut self, fence: i64) -> Rel {
        if let Some(n) = self.seen.iter().position(|f| *f == fence) {
            return Rel::Same(n);
        }
        let above = self.seen.iter().all(|f| fence > *f);
        self.seen.push(fence);
        Rel::New(self.seen.len() - 1, above)
    }

    /// The highest fence so far, for arguments relative to it (RAISE).
    pub fn highest(&self) -> Option<i64> {
        self.seen.iter().copied().max()
    }
}

/// A reply as the contract sees it.
#[derive(Clone, PartialEq, Eq)]
pub enum Norm {
    /// An error reply, its full text (code and message).
    Error(String),
    Nil,
    Int(i64),
    Fence(Rel),
    /// A lease's time left in ms (`-1` for none), compared within [`PTTL_TOLERANCE_MS`].
    Pttl(i64),
    Bytes(Vec<u8>),
    Simple(String),
    Array(Vec<Norm>),
    /// A reply of a type the contract never uses.
    Other(String),
}

impl fmt::Debug for Norm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Norm::Error(e) => write!(f, "(error) {e}"),
            Norm::Nil => write!(f, "nil"),
            Norm::Int(n) => write!(f, "{n}"),
            Norm::Fence(Rel::Same(n)) => write!(f, "fence#{n}"),
            Norm::Fence(Rel::New(n, true)) => write!(f, "fence#{n}(new, above all)"),
            Norm::Fence(Rel::New(n, false)) => write!(f, "fence#{n}(new, NOT above all)"),
            Norm::Pttl(ms) => write!(f, "pttl {ms}"),
            Norm::Bytes(b) => write!(f, "{:?}", String::from_utf8_lossy(b)),
            Norm::Simple(s) => write!(f, "+{s}"),
            Norm::Array(items) => f.debug_list().entries(items).finish(),
            Norm::Other(s) => write!(f, "other {s}"),
        }
    }
}

impl Norm {
    /// Whether two replies agree: equal, pttls within the tolerance.
    pub fn agrees(&self, other: &Norm) -> bool {
        match (self, other) {
            (Norm::Pttl(a), Norm::Pttl(b)) => {
                if *a < 0 || *b < 0 {
                    a == b
                } else {
                    (a - b).abs() <= PTTL_TOLERANCE_MS
                }
            }
            (Norm::Array(a), Norm::Array(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.agrees(y))
            }
            // A reply the client could not read, or of a type the contract never uses, is never
            // agreement, even if both sides gave it.
            (Norm::Other(_), _) | (_, Norm::Other(_)) => false,
            (a, b) => a == b,
        }
    }
}

/// One side's reply to one request, and whether it waited (for requests timed by the case).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub reply: Norm,
    /// `Some(true)` if the reply took at least the given share of a timed request's `BLOCK`.
    pub waited: Option<bool>,
}

impl Outcome {
    pub fn agrees(&self, other: &Outcome) -> bool {
        self.waited == other.waited && self.reply.agrees(&other.reply)
    }
}

/// Sends `cmd` and reduces the reply for `command`: which positions hold fences and pttls is
/// the command's (ACQUIRE and RAISE reply a fence; STATUS a fence, a count, and pttls).
pub fn send(
    server: &Server,
    cmd: &redis::Cmd,
    command: &Command,
    fences: &mut Fences,
    block: Option<u64>,
) -> Outcome {
    let started = Instant::now();
    let raw = server.query::<Value>(cmd);
    let took = started.elapsed();
    let reply = match raw {
        Err(e) if e.code().is_some() => Norm::Error(error_text(&e)),
        Err(e) => Norm::Other(format!("client error: {e}")),
        Ok(value) => reduce(command, value, fences),
    };
    let waited = block.map(|ms| took >= Duration::from_millis(ms * 3 / 4));
    Outcome { reply, waited }
}

fn reduce(command: &Command, value: Value, fences: &mut Fences) -> Norm {
    let is_fence_reply =
        matches!(functions::function(command), Some("fencedlock_acquire" | "fencedlock_raise"));
    match value {
        Value::Int(n) if is_fence_reply => Norm::Fence(fences.relate(n)),
        // ACQUIREALL: a fence per key, in the order asked.
        Value::Array(items) if command.name == ACQUIREALL.name => Norm::Array(
            items
                .into_iter()
                .map(|item| match item {
                    Value::Int(n) => Norm::Fence(fences.relate(n)),
                    other => plain(other),
                })
                .collect(),
        ),
        Value::Array(items) if command.name == STATUS.name => status(items, fences),
        other => plain(other),
    }
}

/// `[fence, held, pttl, label?]` or `[fence, holders, permits, [[fence, pttl, label|nil]…]]`.
fn status(items: Vec<Value>, fences: &mut Fences) -> Norm {
    let semaphore = matches!(items.get(3), Some(Value::Array(_)));
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        out.push(match (i, item) {
            (0, Value::Int(f)) => Norm::Fence(fences.relate(f)),
            (2, Value::Int(ms)) if !semaphore => Norm::Pttl(ms),
            (3, Value::Array(entries)) if semaphore => Norm::Array(
                entries
                    .into_iter()
                    .map(|entry| match entry {
                        Value::Array(parts) => Norm::Array(
                            parts
                                .into_iter()
                                .enumerate()
                                .map(|(j, p)| match (j, p) {
                                    (0, Value::Int(f)) => Norm::Fence(fences.relate(f)),
                                    (1, Value::Int(ms)) => Norm::Pttl(ms),
                                    (_, other) => plain(other),
                                })
                                .collect(),
                        ),
                        other => plain(other),
                    })
                    .collect(),
            ),
            (_, other) => plain(other),
        });
    }
    Norm::Array(out)
}

fn plain(value: Value) -> Norm {
    match value {
        Value::Nil => Norm::Nil,
        Value::Int(n) => Norm::Int(n),
        Value::BulkString(b) => Norm::Bytes(b),
        Value::SimpleString(s) => Norm::Simple(s),
        Value::Okay => Norm::Simple("OK".into()),
        Value::Array(items) => Norm::Array(items.into_iter().map(plain).collect()),
        Value::ServerError(e) => Norm::Error(format!("{} {}", e.code(), e.details().unwrap_or_default())),
        other => Norm::Other(format!("{other:?}")),
    }
}
