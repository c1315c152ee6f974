//! Running the system `redis-cli` against a server, as a reader of the docs would.

use std::ffi::OsStr;
use std::process::{Command, Output, Stdio};

use crate::paths::redis_cli;
use crate::server::Server;

impl Server {
    /// Run `redis-cli -h 127.0.0.1 -p PORT <args...>` and return its output (not checked:
    /// redis-cli exits 0 even for error replies, which it prints as `(error) ...` on a tty
    /// and as `ERR ...` otherwise).
    pub fn redis_cli<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Command::new(redis_cli())
            .arg("-h")
            .arg("127.0.0.1")
            .arg("-p")
            .arg(self.port().to_string())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run redis-cli: {e}"))
    }
}
