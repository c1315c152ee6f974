//! Which engine a server serves leases with (the module, the Functions library, or the
//! library's script), found out by the first request and kept; loading the library where the
//! module is missing and the server's library is missing, older, or altered.

use fencedlock_protocol::command::ACQUIRE;
use fencedlock_protocol::functions;
use redis::RedisError;

use super::{Failure, Node};
use crate::backend::{self, Engine, EngineChoice};
use crate::cause;
use crate::error::Error;

impl Node {
    /// The engine this server serves leases with, once a request has found it out (`None`
    /// before that).
    pub fn engine(&self) -> Option<Engine> {
        self.engine.get().copied()
    }

    /// The engine this server serves leases with, asking the server if no request has yet
    /// (and loading the Functions library where the module is missing and the library is
    /// missing or older than this client's).
    pub async fn detect_engine(&self) -> Result<Engine, Error> {
        self.engine_now().await.map_err(|f| self.error("engine detection", f))
    }

    pub(super) async fn engine_now(&self) -> Result<Engine, Failure> {
        self.engine.get_or_try_init(|| self.detect()).await.copied()
    }

    /// The module where `COMMAND INFO` knows its `ACQUIRE` (or where a server that hides
    /// `COMMAND` has no library loaded), else the Functions library, made current, else (the
    /// server denies `FUNCTION LOAD`) the library's script.
    async fn detect(&self) -> Result<Engine, Failure> {
        let module = match self.choice {
            // Asked before any lease request, so a server without the module never sees (nor
            // echoes in its "unknown command" reply) a token.
            EngineChoice::Only(Engine::Module) => match self.knows_command(ACQUIRE.name).await? {
                Some(false) => return Err(Failure::Redis(no_module())),
                _ => return Ok(Engine::Module),
            },
            EngineChoice::Only(Engine::Script) => {
                self.load_script().await.map_err(|refusal| self.no_engine(refusal))?;
                return Ok(Engine::Script);
            }
            EngineChoice::Only(Engine::Functions) => false,
            EngineChoice::Auto => match self.knows_command(ACQUIRE.name).await? {
                Some(known) => known,
                None => self.library_version().await?.is_none(),
            },
        };
        if module {
            return Ok(Engine::Module);
        }
        let engine = match self.load_library().await {
            Ok(()) => Engine::Functions,
            Err(Failure::Redis(e)) if cause::answered(&e) && self.choice == EngineChoice::Auto => {
                tracing::debug!(node = %self.name, refusal = %e, "the server refused the Functions library; trying it as a script");
                self.load_script().await.map_err(|refusal| self.no_engine(refusal))?;
                Engine::Script
            }
            Err(refusal) => return Err(self.no_engine(refusal)),
        };
        tracing::info!(node = %self.name, %engine, "no fencedlock module on this server: using the Functions library");
        Ok(engine)
    }

    /// Whether `COMMAND INFO` knows `name` (the module's `ACQUIRE`: the module is loaded);
    /// `None` where the server will not say (`COMMAND` renamed away or denied by an ACL).
    pub(super) async fn knows_command(&self, name: &str) -> Result<Option<bool>, Failure> {
        let mut info = redis::cmd("COMMAND");
        info.arg("INFO").arg(name);
        match self.query::<Vec<redis::Value>>(&info, None).await {
            Ok(entries) => Ok(Some(entries.iter().any(|entry| !matches!(entry, redis::Value::Nil)))),
            Err(Failure::Redis(e)) if cause::answered(&e) => Ok(None),
            Err(failure) => Err(failure),
        }
    }

    /// The failure of a lease request whose reply could not be parsed. A server that lost
    /// the module since it was detected answers "unknown command" with the arguments echoed,
    /// the binary token among them, which the `redis` crate cannot parse: without this check
    /// that server reads as a broken reply, not as [`Cause::NoModule`](crate::Cause::NoModule).
    /// The connection is dropped either way, as nothing after an unparsable reply is in step.
    pub(super) async fn unparsable(&self, failure: Failure) -> Failure {
        self.drop_connection();
        if self.engine() != Some(Engine::Module) {
            return failure;
        }
        // Boxed: `knows_command` sends through `query`, which calls this.
        match Box::pin(self.knows_command(ACQUIRE.name)).await {
            Ok(Some(false)) => Failure::Redis(no_module()),
            _ => failure,
        }
    }

    /// `refusal` of the last engine tried, as the error of a server without any engine (one
    /// that answered; an unanswered request stays what it was).
    fn no_engine(&self, refusal: Failure) -> Failure {
        match refusal {
            Failure::Redis(e) if cause::answered(&e) => Failure::Redis(no_engine(&e)),
            failure => failure,
        }
    }

    /// `SCRIPT LOAD` of the library's script (the Script engine).
    async fn load_script(&self) -> Result<(), Failure> {
        self.query::<String>(&backend::script_load(), None).await.map(drop)
    }

    /// The version of the Functions library the server has, `None` if it has none.
    async fn library_version(&self) -> Result<Option<u64>, Failure> {
        let mut version = redis::cmd("FCALL_RO");
        version.arg(functions::VERSION_FUNCTION).arg(0);
        match self.query::<u64>(&version, None).await {
            Ok(version) => Ok(Some(version)),
            Err(Failure::Redis(e)) if cause::answered(&e) => Ok(None),
            Err(failure) => Err(failure),
        }
    }

    /// Loads this client's library unless the server has it or a newer one. A library of
    /// this version whose code differs (changed without a version raise) is replaced too.
    async fn load_library(&self) -> Result<(), Failure> {
        match self.library_version().await? {
            Some(v) if v > functions::VERSION => return Ok(()),
            Some(v) if v == functions::VERSION && !self.library_differs().await? => return Ok(()),
            _ => {}
        }
        let mut load = redis::cmd("FUNCTION");
        load.arg("LOAD").arg("REPLACE").arg(functions::LIBRARY);
        self.query::<redis::Value>(&load, None).await.map(drop)
    }

    /// Whether the server's library's code is other than this client's (`FUNCTION LIST …
    /// WITHCODE`); `false` when the server will not say (an ACL that denies `FUNCTION LIST`).
    async fn library_differs(&self) -> Result<bool, Failure> {
        let mut list = redis::cmd("FUNCTION");
        list.arg("LIST").arg("LIBRARYNAME").arg(functions::NAME).arg("WITHCODE");
        match self.query::<redis::Value>(&list, None).await {
            Ok(libraries) => Ok(backend::library_code(&libraries) != Some(functions::LIBRARY.as_bytes())),
            Err(Failure::Redis(e)) if cause::answered(&e) => Ok(false),
            Err(failure) => Err(failure),
        }
    }
}

/// The error of a server without the module when only the module may serve leases.
fn no_module() -> RedisError {
    redis::make_extension_error(
        cause::NO_MODULE.to_owned(),
        Some(format!(
            "the fencedlock module is not loaded ({} is an unknown command) and only the module may serve leases; load the \
             module (--loadmodule …/libfencedlock_module.so), or let the Functions library serve them (the default engine choice)",
            ACQUIRE.name
        )),
    )
}

/// The error of a server without an engine: no module, and the library neither loaded
/// (`FUNCTION LOAD` denied, or failed) nor runnable as a script (`SCRIPT LOAD` denied).
fn no_engine(refusal: &RedisError) -> RedisError {
    redis::make_extension_error(
        cause::NO_ENGINE.to_owned(),
        Some(format!(
            "the fencedlock module is not loaded and the Functions library could not be loaded ({refusal}); load the module \
             (--loadmodule …/libfencedlock_module.so), or have an administrator load the Functions library \
             (fencedlock functions | redis-cli -x FUNCTION LOAD REPLACE), or allow this user FUNCTION LOAD or SCRIPT LOAD \
             and EVALSHA"
        )),
    )
}
