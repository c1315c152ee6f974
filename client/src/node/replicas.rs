//! How many replicas must confirm a grant, and the `WAIT` that asks them: a value decided once
//! from the configuration, carried by the node that sends the `WAIT` (see the `confirm` module
//! for the confirmed round itself).

use std::time::Duration;

use redis::Cmd;

use super::pool;
use crate::config::LockConfig;

/// How many replicas must confirm a grant, and for how long to wait for them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Confirm {
    replicas: usize,
    timeout: Duration,
}

impl Confirm {
    /// The confirmation `config` asks for, if any.
    pub(crate) fn configured(config: &LockConfig) -> Option<Confirm> {
        (config.confirm_replicas() > 0)
            .then(|| Confirm { replicas: config.confirm_replicas(), timeout: config.confirm_timeout() })
    }

    /// How many replicas must acknowledge.
    pub(crate) fn replicas(&self) -> usize {
        self.replicas
    }

    /// How long the server waits for the acknowledgements.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// `WAIT replicas timeout_ms`: the timeout rounded up to whole milliseconds and never 0
    /// (which would wait forever).
    pub(crate) fn command(&self) -> Cmd {
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(self.replicas).arg(pool::block_ms(self.timeout));
        cmd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(confirm: Confirm) -> Vec<String> {
        crate::node::tests::words(&confirm.command())
    }

    #[test]
    fn the_wait_timeout_rounds_up_and_never_means_forever() {
        let confirm = |replicas, timeout| Confirm { replicas, timeout };
        assert_eq!(args(confirm(2, Duration::from_secs(1))), ["WAIT", "2", "1000"]);
        assert_eq!(args(confirm(1, Duration::from_micros(1_500))), ["WAIT", "1", "2"]);
        assert_eq!(args(confirm(1, Duration::from_nanos(1))), ["WAIT", "1", "1"], "0 would wait forever");
    }

    #[test]
    fn only_a_configured_count_asks_for_confirmation() {
        assert!(Confirm::configured(&LockConfig::default()).is_none());
        let config = LockConfig::builder().confirm_replicas(2).build().expect("config");
        let confirm = Confirm::configured(&config).expect("configured");
        assert_eq!((confirm.replicas, confirm.timeout()), (2, crate::DEFAULT_CONFIRM_TIMEOUT));
    }
}
