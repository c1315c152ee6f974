//! Signals fencedlock receives and passes on to the command it runs.

use tokio::signal::unix::{signal, Signal, SignalKind};

/// The signals forwarded to the command. SIGINT/SIGTERM/SIGHUP/SIGQUIT are how cron,
/// systemd and terminals stop jobs; SIGUSR1/2 are commonly used by jobs for their own
/// purposes (reopen logs, dump state) and must reach them too.
const FORWARDED: [(SignalKind, i32); 6] = [
    (SignalKind::interrupt(), libc::SIGINT),
    (SignalKind::terminate(), libc::SIGTERM),
    (SignalKind::hangup(), libc::SIGHUP),
    (SignalKind::quit(), libc::SIGQUIT),
    (SignalKind::user_defined1(), libc::SIGUSR1),
    (SignalKind::user_defined2(), libc::SIGUSR2),
];

/// Listens for the forwarded signals from start-up on, so none is lost (or kills fencedlock
/// with the lease still held) while the lease is being acquired.
pub struct Signals {
    streams: Vec<(Signal, i32)>,
}

impl Signals {
    /// Installs the handlers. Must run inside the Tokio runtime.
    pub fn install() -> std::io::Result<Signals> {
        let streams = FORWARDED
            .iter()
            .map(|(kind, number)| signal(*kind).map(|s| (s, *number)))
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Signals { streams })
    }

    /// The next signal received (its number).
    pub async fn recv(&mut self) -> i32 {
        let polls = self.streams.iter_mut().map(|(stream, number)| {
            let number = *number;
            Box::pin(async move {
                stream.recv().await;
                number
            })
        });
        futures::future::select_all(polls).await.0
    }
}
