//! Which engine serves the `FENCEDLOCK.*` contract on a server: the module, or the Functions
//! library for servers that cannot load modules (managed services). Detected per server on the
//! first request, or forced by [`LockConfigBuilder::engine`](crate::LockConfigBuilder::engine).

use fencedlock_protocol::command::Command;
use fencedlock_protocol::functions;
use redis::Cmd;

/// The engine a server runs the lease commands with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Engine {
    /// The `fencedlock` module (`FENCEDLOCK.*` commands): every guarantee in the README's
    /// table, waiting on the server (`BLOCK`).
    Module,
    /// The `fencedlock` Functions library (`FCALL fencedlock_*`): the same replies, leases on
    /// the server's wall clock, and waiting in the client between attempts, woken by a
    /// release (`BLPOP` on the key's wake-up list) or the holder's expiry (see the README's
    /// guarantees table, functions column).
    Functions,
}

impl Engine {
    /// The name used in reports and `status --json`: `module` or `functions`.
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Module => "module",
            Engine::Functions => "functions",
        }
    }

    /// The request for `command` on `key`; `rest` appends the arguments after the key. The
    /// Functions form also names the key's floor key where the function takes it, so fences
    /// survive the deletion or expiry of the lock key, and a release the key's wake-up list,
    /// so waiters are woken by it.
    pub(crate) fn command(self, command: &Command, key: &[u8], rest: impl FnOnce(&mut Cmd)) -> Cmd {
        let mut cmd = match (self, functions::function(command)) {
            (Engine::Functions, Some(function)) => {
                let mut cmd = redis::cmd("FCALL");
                if functions::takes_wake(command) {
                    cmd.arg(function)
                        .arg(3)
                        .arg(key)
                        .arg(functions::floor_key(key))
                        .arg(functions::wake_key(key));
                } else if functions::takes_floor(command) {
                    cmd.arg(function).arg(2).arg(key).arg(functions::floor_key(key));
                } else {
                    cmd.arg(function).arg(1).arg(key);
                }
                cmd
            }
            _ => {
                let mut cmd = redis::cmd(command.name);
                cmd.arg(key);
                cmd
            }
        };
        rest(&mut cmd);
        cmd
    }
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
    use fencedlock_protocol::command::{RELEASE, RENEW, STATUS};

    #[test]
    fn each_engine_names_the_command_its_own_way() {
        let renew = |engine: Engine| {
            words(&engine.command(&RENEW, b"k", |c| {
                c.arg("t").arg(5);
            }))
        };
        assert_eq!(renew(Engine::Module), ["FENCEDLOCK.RENEW", "k", "t", "5"]);
        let floor = String::from_utf8(functions::floor_key(b"k")).expect("ascii");
        assert_eq!(
            renew(Engine::Functions),
            ["FCALL", "fencedlock_renew", "2", "k", floor.as_str(), "t", "5"]
        );
        let status = words(&Engine::Functions.command(&STATUS, b"k", |_| {}));
        assert_eq!(status, ["FCALL", "fencedlock_status", "1", "k"]);
        let wake = String::from_utf8(functions::wake_key(b"k")).expect("ascii");
        let release = words(&Engine::Functions.command(&RELEASE, b"k", |c| {
            c.arg("t");
        }));
        assert_eq!(release, ["FCALL", "fencedlock_release", "3", "k", floor.as_str(), wake.as_str(), "t"]);
    }
}
