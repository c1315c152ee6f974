//! The command under the lease: started with the lease in its environment under a guardian
//! process (`guardian.rs`) that outlives fencedlock to kill the command's whole process tree if
//! fencedlock dies; signalled as a process group, and terminated (SIGTERM, then SIGKILL) when
//! the lease is lost.

use std::ffi::OsString;
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::{guardian, tree};
use crate::error::{code, CliError};

/// How often termination checks whether every process of the tree is gone.
const GROUP_POLL: Duration = Duration::from_millis(20);
/// How long an answer of the guardian may take (it answers at once unless killing, which it
/// bounds by two seconds itself).
const ANSWER_LIMIT: Duration = Duration::from_secs(5);

/// The lease's key, fence and ttl in the command's environment.
const ENV_KEY: &str = "FENCEDLOCK_KEY";
const ENV_FENCE: &str = "FENCEDLOCK_FENCE";
const ENV_TTL_MS: &str = "FENCEDLOCK_TTL_MS";
/// An elected leader's epoch (`elect`): its lease's fence, under the name elections give it.
const ENV_EPOCH: &str = "FENCEDLOCK_EPOCH";

/// What the command learns about its lease.
pub struct LeaseEnv<'a> {
    /// `FENCEDLOCK_KEY`.
    pub key: &'a str,
    /// `FENCEDLOCK_FENCE`.
    pub fence: u64,
    /// `FENCEDLOCK_TTL_MS`.
    pub ttl_ms: u64,
    /// Whether the fence is a leader's epoch, also given as `FENCEDLOCK_EPOCH`.
    pub epoch: bool,
}

/// Where the command stands, as the guardian reports it.
#[derive(Debug, Clone, Copy)]
enum State {
    Running,
    Exited(ExitStatus),
    /// The guardian is gone (killed): the command died with it (`PR_SET_PDEATHSIG`); what it
    /// started is killed by [`Job`]'s drop.
    GuardianLost,
}

/// A running command, through its guardian.
pub struct Job {
    pid: i32,
    guardian: Child,
    control: UnixStream,
    state: watch::Receiver<State>,
    counts: mpsc::UnboundedReceiver<usize>,
    /// Whether the command leads its own process group (for the group's last resort kill).
    group: bool,
}

impl Job {
    /// Starts `argv` under a guardian, with the lease in its environment and stdio inherited.
    /// Without a lease (`--on-unavailable run`) the lease variables are removed, inherited ones
    /// included: a command run unlocked must never see a fence, least of all an outer run's.
    ///
    /// With `own_group` the command leads a new process group, so a lost lease stops every
    /// process it started, not just the shell at the top.
    pub async fn spawn(
        argv: &[OsString],
        env: Option<LeaseEnv<'_>>,
        own_group: bool,
    ) -> Result<Job, CliError> {
        let name = argv.first().ok_or_else(|| CliError::Usage("no command given after --".into()))?;
        let name = name.to_string_lossy().into_owned();
        let internal =
            |what: &str, e: io::Error| CliError::Internal(format!("cannot start the guardian ({what}): {e}"));
        let exe = std::env::current_exe().map_err(|e| internal("no path to this program", e))?;
        // Should the guardian die first, its orphans come here rather than to init.
        tree::become_subreaper().map_err(|e| internal("PR_SET_CHILD_SUBREAPER", e))?;
        let (control, theirs) = UnixStream::pair().map_err(|e| internal("socketpair", e))?;
        let mut cmd = Command::new(exe);
        cmd.arg(guardian::ARG)
            .arg(if own_group { guardian::OWN_GROUP } else { guardian::JOIN_GROUP })
            .arg("--")
            .args(argv);
        match env {
            Some(env) => {
                cmd.env(ENV_KEY, env.key)
                    .env(ENV_FENCE, env.fence.to_string())
                    .env(ENV_TTL_MS, env.ttl_ms.to_string());
                match env.epoch {
                    true => cmd.env(ENV_EPOCH, env.fence.to_string()),
                    // An outer election's epoch is no epoch of this lease.
                    false => cmd.env_remove(ENV_EPOCH),
                };
            }
            None => {
                for var in [ENV_KEY, ENV_FENCE, ENV_TTL_MS, ENV_EPOCH] {
                    cmd.env_remove(var);
                }
            }
        }
        cmd.stdin(Stdio::inherit()).stdout(Stdio::inherit()).stderr(Stdio::inherit()).kill_on_drop(false);
        let fd = theirs.as_raw_fd();
        // SAFETY: the closure runs between fork and exec and calls only async-signal-safe
        // functions (dup2, fcntl) on descriptors of the child.
        unsafe {
            cmd.pre_exec(move || {
                if fd == guardian::CONTROL_FD {
                    // dup2 onto itself keeps close-on-exec: clear it.
                    if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                } else if libc::dup2(fd, guardian::CONTROL_FD) < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let guardian = cmd.spawn().map_err(|e| internal("spawn", e))?;
        drop(theirs);

        let (state_tx, state) = watch::channel(State::Running);
        let (count_tx, counts) = mpsc::unbounded_channel();
        let (started_tx, started) = oneshot::channel();
        let reader = control.try_clone().map_err(|e| internal("socket", e))?;
        std::thread::spawn(move || listen(reader, started_tx, state_tx, count_tx));
        let started = tokio::time::timeout(ANSWER_LIMIT, started).await;
        let pid = match started {
            Ok(Ok(Ok(pid))) => pid,
            Ok(Ok(Err((kind, message)))) => {
                return Err(match kind.as_str() {
                    "not-found" => CliError::Spawn {
                        message: format!("command not found: {name}; check the command after -- and PATH"),
                        code: code::NOT_FOUND,
                    },
                    "denied" => CliError::Spawn {
                        message: format!("command not executable: {name} ({message}); check its permissions"),
                        code: code::NOT_EXECUTABLE,
                    },
                    _ => CliError::Spawn {
                        message: format!("cannot start {name}: {message}"),
                        code: code::NOT_EXECUTABLE,
                    },
                })
            }
            Ok(Err(_)) | Err(_) => {
                return Err(CliError::Internal(format!("the guardian did not start {name}")));
            }
        };
        Ok(Job { pid, guardian, control, state, counts, group: own_group })
    }

    /// The command's pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Waits for the command to exit. Cancel-safe.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            match *self.state.borrow_and_update() {
                State::Exited(status) => return Ok(status),
                State::GuardianLost => return Err(io::Error::other("the guardian process died")),
                State::Running => {}
            }
            if self.state.changed().await.is_err() {
                return Err(io::Error::other("the guardian process died"));
            }
        }
    }

    /// Sends `signal` to the command (its whole group when it leads one).
    pub fn signal(&self, signal: i32) {
        self.tell(&format!("signal {signal}"));
    }

    /// SIGTERM now to every process of the command's tree; SIGKILL to whatever is left at
    /// `kill_at` (at once if it has passed). Returns the command's status.
    pub async fn terminate(&mut self, kill_at: Instant) -> io::Result<ExitStatus> {
        self.tell("term");
        loop {
            if Instant::now() >= kill_at {
                tracing::info!(pid = self.pid, "kill deadline reached, sending SIGKILL");
                self.ask("kill").await;
                break;
            }
            // Never sleep past the deadline: the kill is due at it, not a poll later.
            tokio::time::sleep_until(kill_at.min(Instant::now() + GROUP_POLL)).await;
            if self.ask("count").await == Some(0) {
                break;
            }
        }
        self.wait().await
    }

    /// Once the command itself has exited: stops what it left running (SIGTERM, SIGKILL after
    /// `grace`), so nothing it started runs on after the lease is released, and lets the
    /// guardian go. How many processes were left.
    pub async fn finish(mut self, grace: Duration) -> usize {
        let left = self.ask("count").await.unwrap_or(0);
        if left > 0 {
            self.tell("term");
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline && self.ask("count").await != Some(0) {
                tokio::time::sleep_until(deadline.min(Instant::now() + GROUP_POLL)).await;
            }
        }
        self.tell("end");
        let _ = tokio::time::timeout(ANSWER_LIMIT, self.guardian.wait()).await;
        left
    }

    /// Sends one request; a guardian that is gone cannot hear it (its death was reported).
    fn tell(&self, request: &str) {
        if let Err(e) = (&self.control).write_all(format!("{request}\n").as_bytes()) {
            tracing::debug!(request, error = %e, "the guardian did not take a request");
        }
    }

    /// Sends a request that is answered with a count, and waits for the count.
    async fn ask(&mut self, request: &str) -> Option<usize> {
        self.tell(request);
        tokio::time::timeout(ANSWER_LIMIT, self.counts.recv()).await.ok().flatten()
    }
}

impl Drop for Job {
    /// Closing the control socket is the guardian's signal to kill the whole tree: a job
    /// dropped on an error path leaves nothing running. Should the guardian be gone already,
    /// the command's group gets the SIGKILL from here.
    fn drop(&mut self) {
        // A shutdown ends the socket for every descriptor of it (the listener thread's too).
        let _ = self.control.shutdown(std::net::Shutdown::Both);
        if matches!(*self.state.borrow(), State::GuardianLost) {
            // What the guardian left came here (fencedlock is a subreaper too).
            let left = tree::kill_all(if self.group { -self.pid } else { self.pid }, || {});
            tracing::info!(left, "the guardian died; killed what was left of the command's tree");
        }
    }
}

/// The guardian's side of the socket, read on a thread of its own (its lines are few).
fn listen(
    control: UnixStream,
    started: oneshot::Sender<Result<i32, (String, String)>>,
    state: watch::Sender<State>,
    counts: mpsc::UnboundedSender<usize>,
) {
    let mut started = Some(started);
    for line in BufReader::new(control).lines() {
        let Ok(line) = line else { break };
        let (word, rest) = line.split_once(' ').unwrap_or((&line, ""));
        match word {
            "pid" => {
                if let (Some(tx), Ok(pid)) = (started.take(), rest.parse()) {
                    let _ = tx.send(Ok(pid));
                }
            }
            "spawn-error" => {
                let (kind, message) = rest.split_once(' ').unwrap_or((rest, ""));
                if let Some(tx) = started.take() {
                    let _ = tx.send(Err((kind.to_owned(), message.to_owned())));
                }
            }
            "exit" => {
                if let Ok(raw) = rest.parse() {
                    let _ = state.send(State::Exited(ExitStatus::from_raw(raw)));
                }
            }
            "count" => {
                if let Ok(n) = rest.parse() {
                    let _ = counts.send(n);
                }
            }
            _ => tracing::debug!(line, "unexpected line from the guardian"),
        }
    }
    state.send_if_modified(|s| {
        let running = matches!(s, State::Running);
        if running {
            *s = State::GuardianLost;
        }
        running
    });
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
