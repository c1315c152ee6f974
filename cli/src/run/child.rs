//! The command under the lease: started with the lease in its environment, signalled as a
//! process group, and terminated (SIGTERM, then SIGKILL) when the lease is lost.

use std::ffi::OsString;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::error::{code, CliError};

/// How often termination checks whether every process of the group is gone.
const GROUP_POLL: Duration = Duration::from_millis(20);

/// A running command.
pub struct Job {
    child: Child,
    pid: i32,
    /// Whether the command leads its own process group (signals go to the whole group).
    group: bool,
    status: Option<ExitStatus>,
}

/// The lease's key, fence and ttl in the command's environment.
const ENV_KEY: &str = "FENCEDLOCK_KEY";
const ENV_FENCE: &str = "FENCEDLOCK_FENCE";
const ENV_TTL_MS: &str = "FENCEDLOCK_TTL_MS";

/// What the command learns about its lease.
pub struct LeaseEnv<'a> {
    /// `FENCEDLOCK_KEY`.
    pub key: &'a str,
    /// `FENCEDLOCK_FENCE`.
    pub fence: u64,
    /// `FENCEDLOCK_TTL_MS`.
    pub ttl_ms: u64,
}

impl Job {
    /// Starts `argv` with the lease in its environment and stdio inherited. Without a lease
    /// (`--on-unavailable run`) the lease variables are removed, inherited ones included: a
    /// command run unlocked must never see a fence, least of all an outer run's.
    ///
    /// With `own_group` the command leads a new process group, so a lost lease stops every
    /// process it started, not just the shell at the top. It also dies with fencedlock
    /// (`PR_SET_PDEATHSIG`): if fencedlock is killed nobody renews the lease, so the
    /// command must not go on writing.
    pub fn spawn(argv: &[OsString], env: Option<LeaseEnv<'_>>, own_group: bool) -> Result<Job, CliError> {
        let (program, args) =
            argv.split_first().ok_or_else(|| CliError::Usage("no command given after --".into()))?;
        let mut cmd = Command::new(program);
        cmd.args(args);
        match env {
            Some(env) => {
                cmd.env(ENV_KEY, env.key)
                    .env(ENV_FENCE, env.fence.to_string())
                    .env(ENV_TTL_MS, env.ttl_ms.to_string());
            }
            None => {
                for var in [ENV_KEY, ENV_FENCE, ENV_TTL_MS] {
                    cmd.env_remove(var);
                }
            }
        }
        cmd.stdin(Stdio::inherit()).stdout(Stdio::inherit()).stderr(Stdio::inherit()).kill_on_drop(false);
        if own_group {
            cmd.process_group(0);
        }
        die_with_parent(&mut cmd);
        let child = cmd.spawn().map_err(|e| {
            let name = program.to_string_lossy();
            match e.kind() {
                io::ErrorKind::NotFound => CliError::Spawn {
                    message: format!("command not found: {name}; check the command after -- and PATH"),
                    code: code::NOT_FOUND,
                },
                io::ErrorKind::PermissionDenied => CliError::Spawn {
                    message: format!("command not executable: {name} ({e}); check its permissions"),
                    code: code::NOT_EXECUTABLE,
                },
                _ => CliError::Spawn {
                    message: format!("cannot start {name}: {e}"),
                    code: code::NOT_EXECUTABLE,
                },
            }
        })?;
        let pid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .ok_or_else(|| CliError::Internal("the command exited before its pid was known".into()))?;
        Ok(Job { child, pid, group: own_group, status: None })
    }

    /// The command's pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Waits for the command to exit. Cancel-safe.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let status = self.child.wait().await?;
        self.status = Some(status);
        Ok(status)
    }

    /// Sends `signal` to the command (its whole group when it leads one).
    pub fn signal(&self, signal: i32) {
        let target = if self.group { -self.pid } else { self.pid };
        if self.status.is_some() && !self.group {
            return; // reaped: the pid may belong to someone else by now
        }
        // SAFETY: kill(2) has no memory-safety preconditions.
        let rc = unsafe { libc::kill(target, signal) };
        if rc != 0 {
            tracing::debug!(target, signal, error = %io::Error::last_os_error(), "kill failed");
        }
    }

    /// Whether any process of the command's group (or the command) is still there.
    fn any_alive(&self) -> bool {
        if self.group {
            // SAFETY: signal 0 only checks for existence.
            unsafe { libc::kill(-self.pid, 0) == 0 }
        } else {
            self.status.is_none()
        }
    }

    /// SIGTERM now; SIGKILL to whatever is left at `kill_at` (at once if it has passed).
    /// Returns the command's status.
    pub async fn terminate(&mut self, kill_at: Instant) -> io::Result<ExitStatus> {
        self.signal(libc::SIGTERM);
        loop {
            if Instant::now() >= kill_at {
                tracing::info!(pid = self.pid, "kill deadline reached, sending SIGKILL");
                self.signal(libc::SIGKILL);
                break;
            }
            // Never sleep past the deadline: the kill is due at it, not a poll later.
            let nap = tokio::time::sleep_until(kill_at.min(Instant::now() + GROUP_POLL));
            if self.status.is_none() {
                tokio::select! {
                    status = self.child.wait() => { self.status = Some(status?); }
                    _ = nap => {}
                }
            } else {
                nap.await;
            }
            if !self.any_alive() {
                break;
            }
        }
        self.wait().await
    }
}

/// The exit code a shell would report: the command's own, or 128 + the signal that ended it.
pub fn exit_code(status: ExitStatus) -> u8 {
    if let Some(code) = status.code() {
        return u8::try_from(code & 0xff).unwrap_or(code::INTERNAL);
    }
    match status.signal() {
        Some(sig) => code::SIGNAL_BASE.saturating_add(u8::try_from(sig).unwrap_or(0)),
        None => code::INTERNAL,
    }
}

#[cfg(target_os = "linux")]
fn die_with_parent(cmd: &mut Command) {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs between fork and exec and calls only async-signal-safe
    // functions (prctl, getppid, kill on itself).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // fencedlock may have died between fork and prctl.
            if libc::getppid() != parent {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_cmd: &mut Command) {}
