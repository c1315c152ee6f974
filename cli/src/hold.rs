//! `fencedlock hold KEY`: a lease for the rest of a shell script. It takes the lease, prints
//! the fence, and stays running to keep the lease alive until the script is done with it:
//! until the process it watches (the shell that started it, or `--pid`) exits, until the
//! reader of its output closes it (`exec 9<&-`, as closing flock's descriptor unlocks), or
//! until a signal asks it to stop. A lost lease is the script's business: its shell gets
//! `--signal`, and hold exits 76.
//!
//! The watching is one thread blocked in `poll(2)` on a pidfd of the watched process (readable
//! when it exits; signalled through, so a recycled pid can never get the signal) and on stdout
//! (a pipe reports an error once its last reader is gone). Where `pidfd_open` is missing (Linux
//! before 5.3) the thread polls the process's existence every [`FALLBACK_POLL`] instead.

use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::oneshot;

use crate::args::{AcquireOnUnavailable, HoldArgs};
use crate::diagnose::{self, Context};
use crate::error::{code, CliError};
use crate::output::Output;
use crate::run::signals::Signals;
use crate::servers::{self, LeaseOptions};

/// How often the watcher checks the watched process where no pidfd can be had.
const FALLBACK_POLL: Duration = Duration::from_millis(200);

/// Why the script is done with the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Done {
    /// The watched process (the shell) exited.
    Exited,
    /// The reader of hold's output closed it.
    Closed,
}

/// Takes the lease, prints its fence, and holds it until the script is done with it.
pub async fn hold(args: &HoldArgs, out: Output, signals: &mut Signals) -> Result<u8, CliError> {
    let key = args.key.name();
    let parent = args.pid.is_none();
    // SAFETY: getppid has no preconditions.
    let watched = args.pid.unwrap_or_else(|| unsafe { libc::getppid() });
    let process = Process::open(watched, parent).map_err(|e| {
        CliError::Usage(format!("cannot watch process {watched}: {e}; give a running process with --pid"))
    })?;
    let process = Arc::new(process);
    let mut done = watch(Arc::clone(&process));

    let server = &args.server;
    let options =
        LeaseOptions { ttl: args.ttl, wait: args.wait, timeout: server.timeout, label: args.label.value() };
    let lock = servers::open(server, options)?;
    let holding = servers::holding(&lock, key, args.permits.count, false)?;
    let ctx = Context::new(key, args.wait, server);
    let acquired = tokio::select! {
        lease = servers::acquire(&lock, key, &holding, |_| {}) => lease,
        sig = signals.recv() => return Ok(code::SIGNAL_BASE.saturating_add(u8::try_from(sig).unwrap_or(0))),
        _ = &mut done => return Ok(code::OK),
    };
    let lease = match acquired {
        Ok(lease) => lease,
        Err(e) if e.is_unavailable() && args.on_unavailable == AcquireOnUnavailable::Skip => {
            return Ok(crate::run::skip_unavailable(key, &diagnose::explain(&e, ctx), out));
        }
        Err(e) => return Err(diagnose::explain(&e, ctx)),
    };
    crate::run::warn_about_minority(&lease, out);
    let fence = lease.fence();
    let kept = lease.keep_alive();
    let record = json!({
        "key": key, "fence": fence, "ttl_ms": lock.config().ttl_ms(), "label": args.label.value(),
        "pid": std::process::id(), "watching": watched,
    });
    if !print_fence(out, fence, &record) {
        // Nobody read the fence: nobody is using the lease.
        crate::run::release(&lock, kept, out).await;
        return Ok(code::OK);
    }

    let lost = kept.cancellation();
    let ended = tokio::select! {
        _ = lost.cancelled() => None,
        why = &mut done => Some(format!("{:?}", why.unwrap_or(Done::Exited))),
        sig = signals.recv() => Some(format!("signal {sig}")),
    };
    if let Some(why) = ended {
        tracing::info!(key, fence, why, "the script is done with the lease; releasing it");
        crate::run::release(&lock, kept, out).await;
        return Ok(code::OK);
    }
    let reason = match kept.handle().loss() {
        Some(fencedlock::Error::LeaseLost { cause, .. }) => cause.to_string(),
        Some(other) => other.to_string(),
        None => "the keep-alive stopped".into(),
    };
    let signalled = args.signal.0.map(|sig| (sig, process.signal(sig)));
    crate::run::release(&lock, kept, out).await;
    let told = match signalled {
        Some((sig, Ok(()))) => format!("sent signal {sig} to process {watched}"),
        Some((sig, Err(e))) => format!("could not send signal {sig} to process {watched}: {e}"),
        None => "no signal sent (--signal none)".into(),
    };
    Err(CliError::LeaseLost(format!(
        "the lease on {key:?} (fence {fence}) was lost ({reason}): the script's work may overlap with another owner's; {told}"
    )))
}

/// The fence on stdout, a line of its own (or the record with `--json`); `false` when
/// nobody reads it.
fn print_fence(out: Output, fence: u64, record: &serde_json::Value) -> bool {
    let mut stdout = std::io::stdout().lock();
    let line = if out.json { record.to_string() } else { fence.to_string() };
    writeln!(stdout, "{line}").and_then(|()| stdout.flush()).is_ok()
}

/// The process hold watches: a pidfd of it where the kernel has them, else its pid (and,
/// for the parent, the check that it still is).
struct Process {
    pid: libc::pid_t,
    parent: bool,
    pidfd: Option<OwnedFd>,
}

impl Process {
    fn open(pid: libc::pid_t, parent: bool) -> std::io::Result<Process> {
        // Pid 1 stays allowed: a container's shell is its namespace's init.
        if pid <= 0 {
            return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        }
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        let pidfd = match fd {
            -1 => {
                let err = std::io::Error::last_os_error();
                if err.raw_os_error() == Some(libc::ESRCH) {
                    return Err(err);
                }
                None
            }
            // SAFETY: the descriptor was just returned to us and nothing else owns it.
            fd => Some(unsafe { OwnedFd::from_raw_fd(fd as i32) }),
        };
        let process = Process { pid, parent, pidfd };
        // The parent may have died before the pidfd was made (the pid might then be another's).
        if !process.alive() {
            return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        }
        Ok(process)
    }

    /// Whether it still runs (for the parent: whether it is still our parent).
    fn alive(&self) -> bool {
        if self.parent {
            // SAFETY: getppid has no preconditions.
            return unsafe { libc::getppid() } == self.pid;
        }
        // SAFETY: kill with signal 0 only checks that the process exists.
        let rc = unsafe { libc::kill(self.pid, 0) };
        rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
    }

    /// Sends `sig`, through the pidfd where there is one (never to a recycled pid).
    fn signal(&self, sig: i32) -> std::io::Result<()> {
        let rc = match &self.pidfd {
            // SAFETY: pidfd_send_signal on a pidfd we own, no siginfo, no flags.
            Some(fd) => unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    fd.as_raw_fd(),
                    sig,
                    std::ptr::null::<libc::siginfo_t>(),
                    0,
                ) as i32
            },
            None if self.alive() => {
                // SAFETY: kill(2) has no memory-safety preconditions.
                unsafe { libc::kill(self.pid, sig) }
            }
            None => return Err(std::io::Error::from_raw_os_error(libc::ESRCH)),
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

/// Starts the watcher thread; the receiver completes when the script is done with the lease.
fn watch(process: Arc<Process>) -> oneshot::Receiver<Done> {
    let (tx, rx) = oneshot::channel();
    let stdout_is_pipe = is_pipe(libc::STDOUT_FILENO);
    std::thread::spawn(move || {
        let done = wait_until_done(&process, stdout_is_pipe);
        let _ = tx.send(done);
    });
    rx
}

/// Blocks until the watched process exits or stdout's reader is gone.
fn wait_until_done(process: &Process, stdout_is_pipe: bool) -> Done {
    loop {
        let mut fds = Vec::with_capacity(2);
        if let Some(fd) = &process.pidfd {
            fds.push(libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        }
        if stdout_is_pipe {
            // No events asked: a pipe's writer is told POLLERR once no reader is left.
            fds.push(libc::pollfd { fd: libc::STDOUT_FILENO, events: 0, revents: 0 });
        }
        let timeout = if process.pidfd.is_some() { -1 } else { FALLBACK_POLL.as_millis() as i32 };
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd structs for the call's duration.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
        if ready < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            // Cannot watch any more: keep the lease only as long as the process is seen alive.
            std::thread::sleep(FALLBACK_POLL);
        }
        for pollfd in &fds {
            if pollfd.revents == 0 {
                continue;
            }
            return if pollfd.fd == libc::STDOUT_FILENO { Done::Closed } else { Done::Exited };
        }
        if process.pidfd.is_none() && !process.alive() {
            return Done::Exited;
        }
    }
}

/// Whether `fd` is a pipe or a socket (whose reader can go away), not a file or a terminal.
fn is_pipe(fd: i32) -> bool {
    // SAFETY: fstat writes into the zeroed struct it is given.
    unsafe {
        let mut stat: libc::stat = std::mem::zeroed();
        libc::fstat(fd, &mut stat) == 0
            && matches!(stat.st_mode & libc::S_IFMT, libc::S_IFIFO | libc::S_IFSOCK)
    }
}
