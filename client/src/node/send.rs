//! What a node's connections send, one command or a pipeline, and the one `NOSCRIPT` retry
//! that the shared connection and the dedicated ones alike make.

use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue, Pipeline, RedisError};

use crate::backend;

/// What the shared connection sends: one command, or a pipeline of them (a session's
/// renewals; see the `batch` module).
pub(crate) trait Packed: Sync {
    /// Sends this on `conn` and reads the reply.
    fn send<C: ConnectionLike + Send, T: FromRedisValue>(
        &self,
        conn: &mut C,
    ) -> impl std::future::Future<Output = Result<T, RedisError>> + Send;
}

impl Packed for Cmd {
    fn send<C: ConnectionLike + Send, T: FromRedisValue>(
        &self,
        conn: &mut C,
    ) -> impl std::future::Future<Output = Result<T, RedisError>> + Send {
        self.query_async(conn)
    }
}

impl Packed for Pipeline {
    fn send<C: ConnectionLike + Send, T: FromRedisValue>(
        &self,
        conn: &mut C,
    ) -> impl std::future::Future<Output = Result<T, RedisError>> + Send {
        self.query_async(conn)
    }
}

/// `cmd` on `conn`, sent once more after loading the Script engine's script if the server's
/// cache lacks it (a restart or a failover emptied it). The one `NOSCRIPT` retry, for the
/// shared connection and the dedicated ones alike. (A pipeline's commands answer one by one;
/// the `batch` module retries those.)
pub(super) async fn reloading<C: ConnectionLike + Send, T: FromRedisValue, P: Packed>(
    conn: &mut C,
    cmd: &P,
) -> Result<T, RedisError> {
    match cmd.send(conn).await {
        Err(e) if backend::lacks_script(&e) => {
            backend::script_load().query_async::<String>(conn).await?;
            cmd.send(conn).await
        }
        result => result,
    }
}
