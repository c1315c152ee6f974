//! Which engine serves the `FENCEDLOCK.*` contract on a server: the module, or the Functions
//! library for servers that cannot load modules (managed services), or the same library run
//! as a script where `FUNCTION` is denied too. Detected per server on the first request, or
//! forced by [`LockConfigBuilder::engine`](crate::LockConfigBuilder::engine).

use std::borrow::Cow;

use fencedlock_protocol::command::{Command, ACQUIRE};
use fencedlock_protocol::functions;
use fencedlock_protocol::request::{Acquire, Request};
use redis::{Cmd, ErrorKind, RedisError};

/// The engine a server runs the lease commands with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Engine {
    /// The `fencedlock` module (`FENCEDLOCK.*` commands): every guarantee in the table of
    /// `docs/guarantees.md`, waiting on the server (`BLOCK`).
    Module,
    /// The `fencedlock` Functions library (`FCALL fencedlock_*`): the same replies, leases on
    /// the server's wall clock, and waiting in the client between attempts, woken by a
    /// release (`BLPOP` on the key's wake-up list) or the holder's expiry (see `docs/guarantees.md`,
    /// functions column).
    Functions,
    /// The Functions library's source run as a script (`EVALSHA`), for servers that deny
    /// `FUNCTION`: the Functions engine's replies and guarantees, the script loaded again
    /// whenever the server's script cache lost it (a restart, a failover, `SCRIPT FLUSH`).
    Script,
}

impl Engine {
    /// The name used in reports and `status --json`: `module`, `functions` or `script`.
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Module => "module",
            Engine::Functions => "functions",
            Engine::Script => "script",
        }
    }

    /// Whether the server can wait (`BLOCK`); elsewhere the client waits between attempts,
    /// woken by releases (see the `wake` module).
    pub(crate) fn blocks(self) -> bool {
        self == Engine::Module
    }

    /// `request` as this engine's command, word for word as the protocol builds it, the name
    /// and the key replaced by the engine's form of them. The Functions form also names the
    /// key's floor key where the function takes it, so fences survive the deletion or expiry
    /// of the lock key, and a release the key's wake-up list, so waiters are woken by it;
    /// `ACQUIREALL`'s keys are followed by their slot's floor key.
    pub(crate) fn call<'a, R: Request<'a>>(self, request: &R) -> Cmd {
        self.form(&R::COMMAND, &request.words(), false)
    }

    /// An `ACQUIRE` as a waiter sends it: the Functions form names the key's wake-up list, so
    /// a refusal asks the releases to come to wake the waiter (most releases have nobody to
    /// wake and skip the list).
    pub(crate) fn waiting_call(self, request: &Acquire<'_>) -> Cmd {
        self.form(&ACQUIRE, &request.words(), true)
    }

    /// The protocol's [`functions::form`] of the words, as a command.
    fn form(self, command: &Command, words: &[Cow<'_, [u8]>], waiting: bool) -> Cmd {
        let form = match self {
            Engine::Module => functions::Form::Module,
            Engine::Functions => functions::Form::Fcall,
            Engine::Script => functions::Form::Evalsha,
        };
        let mut cmd = Cmd::new();
        for word in functions::form(form, command, words, waiting) {
            cmd.arg(&word[..]);
        }
        cmd
    }
}

/// `SCRIPT LOAD` of the Script engine's script, answered with the SHA1 its requests name.
pub(crate) fn script_load() -> Cmd {
    redis::cmd("SCRIPT").arg("LOAD").arg(functions::eval_script()).take()
}

/// Whether `err` says the server's script cache lacks the script (`NOSCRIPT`): nothing ran,
/// so the request may follow a [`script_load`] at once.
pub(crate) fn lacks_script(err: &RedisError) -> bool {
    err.kind() == ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// The `library_code` of the first library in a `FUNCTION LIST … WITHCODE` reply (RESP2: a
/// list of flat field/value lists; RESP3: maps), `None` when there is none.
pub(crate) fn library_code(libraries: &redis::Value) -> Option<&[u8]> {
    use redis::Value;
    let fields: Vec<(&Value, &Value)> = match libraries {
        Value::Array(libraries) => match libraries.first()? {
            Value::Array(flat) => flat.chunks_exact(2).map(|pair| (&pair[0], &pair[1])).collect(),
            Value::Map(pairs) => pairs.iter().map(|(k, v)| (k, v)).collect(),
            _ => return None,
        },
        _ => return None,
    };
    fn text(v: &redis::Value) -> Option<&[u8]> {
        match v {
            redis::Value::BulkString(bytes) => Some(bytes.as_slice()),
            redis::Value::SimpleString(s) => Some(s.as_bytes()),
            _ => None,
        }
    }
    fields.into_iter().find(|(name, _)| text(name) == Some(b"library_code")).and_then(|(_, code)| text(code))
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which engine to use: detect it per server (the default), or insist on one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EngineChoice {
    /// The module where it is loaded, else the Functions library (loaded if missing or older).
    #[default]
    Auto,
    /// Only this engine; a server without it is an error.
    Only(Engine),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::tests::words;
    use fencedlock_protocol::request::Status;
    use fencedlock_protocol::{AcquireAll, Raise, Release, Renew};

    /// The script's SHA1 as redis-rs computes it, which the protocol's must equal.
    fn script_sha() -> String {
        redis::Script::new(functions::eval_script()).get_hash().to_owned()
    }

    #[test]
    fn the_library_code_is_found_in_a_function_list_reply() {
        use redis::Value;
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let flat = Value::Array(vec![Value::Array(vec![
            bulk("library_name"),
            bulk("fencedlock"),
            bulk("engine"),
            bulk("LUA"),
            bulk("functions"),
            Value::Array(vec![]),
            bulk("library_code"),
            bulk("#!lua name=fencedlock\n"),
        ])]);
        assert_eq!(library_code(&flat), Some(&b"#!lua name=fencedlock\n"[..]));
        let map = Value::Array(vec![Value::Map(vec![(bulk("library_code"), bulk("x"))])]);
        assert_eq!(library_code(&map), Some(&b"x"[..]));
        assert_eq!(library_code(&Value::Array(vec![])), None, "no library");
    }

    #[test]
    fn each_engine_names_the_command_its_own_way() {
        let renew = |engine: Engine| words(&engine.call(&Renew { key: b"k", token: b"t", ttl_ms: 5 }));
        assert_eq!(renew(Engine::Module), ["FENCEDLOCK.RENEW", "k", "t", "5"]);
        let floor = String::from_utf8(functions::floor_key(b"k")).expect("ascii");
        assert_eq!(
            renew(Engine::Functions),
            ["FCALL", "fencedlock_renew", "2", "k", floor.as_str(), "t", "5"]
        );
        let script = words(&Engine::Script.call(&Raise { key: b"k", token: b"t", fence: 9 }));
        assert_eq!(
            script,
            ["EVALSHA", script_sha().as_str(), "2", "k", floor.as_str(), "fencedlock_raise", "t", "9"]
        );
        let status = words(&Engine::Functions.call(&Status { key: b"k" }));
        assert_eq!(status, ["FCALL", "fencedlock_status", "1", "k"]);
        let wake = String::from_utf8(functions::wake_key(b"k")).expect("ascii");
        let release = words(&Engine::Functions.call(&Release { key: b"k", token: b"t" }));
        assert_eq!(release, ["FCALL", "fencedlock_release", "3", "k", floor.as_str(), wake.as_str(), "t"]);
        let acquire = Acquire::mutex(b"k", b"t", 5);
        let waiting = words(&Engine::Functions.waiting_call(&acquire));
        assert_eq!(
            waiting,
            ["FCALL", "fencedlock_acquire", "3", "k", floor.as_str(), wake.as_str(), "t", "5"]
        );
        assert_eq!(words(&Engine::Module.waiting_call(&acquire)), ["FENCEDLOCK.ACQUIRE", "k", "t", "5"]);
        assert_eq!(
            words(&Engine::Functions.call(&acquire)),
            ["FCALL", "fencedlock_acquire", "2", "k", floor.as_str(), "t", "5"]
        );
        // A set: the keys, then their slot's floor, last.
        let set = AcquireAll::new(vec![b"{s}a", b"{s}b"], Acquire::mutex(b"{s}a", b"t", 5));
        assert_eq!(
            words(&Engine::Module.call(&set)),
            ["FENCEDLOCK.ACQUIREALL", "2", "{s}a", "{s}b", "t", "5"]
        );
        let floor = String::from_utf8(functions::floor_key(b"{s}")).expect("ascii");
        assert_eq!(
            words(&Engine::Script.call(&set)),
            [
                "EVALSHA",
                script_sha().as_str(),
                "3",
                "{s}a",
                "{s}b",
                floor.as_str(),
                "fencedlock_acquireall",
                "t",
                "5"
            ]
        );
    }
}
