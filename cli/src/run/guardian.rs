//! The guardian: a small process between `fencedlock run` and its command, which outlives the
//! CLI for exactly one purpose. When the CLI dies by any signal (SIGKILL and the OOM killer
//! included, which no handler sees), nobody renews the lease, and another host may be granted
//! it once it expires: everything the command started must be gone before then. The guardian
//! notices the death at once (its control socket to the CLI reaches end of file) and kills the
//! command's whole process tree.
//!
//! Why a process of its own: the kernel's `PR_SET_PDEATHSIG` reaches only the direct child (a
//! shell), never the processes it started, and a pid namespace (which kills everything when
//! its first process dies) needs privileges most cron users do not have. The guardian is a
//! *child subreaper* (`PR_SET_CHILD_SUBREAPER`): every process of the tree whose parent dies is
//! re-parented to it, so a grandchild that calls `setsid` or double-forks to leave the command's
//! process group still cannot leave the tree. It walks the tree in `/proc` and kills it until
//! nothing is left. What it cannot catch is work handed to a process outside the tree (a job
//! queued with `at`, a unit started by `systemd-run`, a request to a server): the fence still
//! protects the resource from those.
//!
//! The guardian runs in its own process group, so a signal to the CLI's group (a terminal's
//! Ctrl-C, `kill -- -PGID`) does not take it along; it ignores the signals the CLI forwards
//! and dies only by SIGKILL. The command dies with it (`PR_SET_PDEATHSIG`), and the CLI, still
//! alive then, stops the rest of the group.
//!
//! The control protocol, one line each way per message (`child.rs` is the other end):
//! CLI → guardian `signal N` (to the command, as the CLI forwards signals), `term` (SIGTERM to
//! every process of the tree), `kill` (SIGKILL to the tree until it is gone, answered with
//! `count N`), `count` (answered `count N`, the live processes of the tree), `end` (kill what is
//! left and exit); guardian → CLI `pid P` or `spawn-error KIND MESSAGE` once, `exit STATUS`
//! (the command's raw wait status) when the command itself exits.

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicI32, Ordering};

use super::tree;

/// The first argument that makes `fencedlock` the guardian (visible as such in `ps`).
pub const ARG: &str = "__guardian";
/// The control socket's descriptor in the guardian.
pub const CONTROL_FD: i32 = 3;
/// The command leads a process group of its own (`own`) or joins the CLI's (`join`).
pub const OWN_GROUP: &str = "own";
pub const JOIN_GROUP: &str = "join";

/// The signals the CLI forwards to the command: the guardian ignores them (the CLI decides),
/// and the command gets their default dispositions back.
const FORWARDED: [i32; 6] =
    [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT, libc::SIGUSR1, libc::SIGUSR2];

/// The write end of the self-pipe the SIGCHLD handler writes to.
static CHILD_EXITED: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_sigchld(_: libc::c_int) {
    let fd = CHILD_EXITED.load(Ordering::Relaxed);
    // SAFETY: write(2) is async-signal-safe; the buffer is a valid one-byte static.
    unsafe { libc::write(fd, b"c".as_ptr().cast(), 1) };
}

/// Runs the guardian (`fencedlock __guardian own|join -- CMD ARGS…`); never returns to the CLI.
pub fn main(args: &[OsString]) -> ExitCode {
    match guard(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("fencedlock guardian: {err}");
            ExitCode::from(crate::error::code::INTERNAL)
        }
    }
}

fn guard(args: &[OsString]) -> io::Result<()> {
    let (own_group, argv) = match args {
        [mode, dashes, argv @ ..] if dashes == "--" && !argv.is_empty() => (mode == OWN_GROUP, argv),
        _ => return Err(io::Error::other("usage: fencedlock __guardian own|join -- CMD ARGS…")),
    };
    // SAFETY: the CLI passes the control socket as this descriptor and nobody else owns it.
    let mut control = unsafe { UnixStream::from_raw_fd(CONTROL_FD) };
    set_cloexec(CONTROL_FD)?;
    let wakeups = install_signals()?;
    tree::become_subreaper()?;
    name_self();
    // SAFETY: getpgrp and setpgid have no memory-safety preconditions.
    let cli_group = unsafe { libc::getpgrp() };
    // SAFETY: as above.
    if unsafe { libc::setpgid(0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }

    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]).process_group(if own_group { 0 } else { cli_group });
    let guardian = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs between fork and exec and calls only async-signal-safe
    // functions (signal, sigprocmask, prctl, getppid, kill).
    unsafe {
        cmd.pre_exec(move || {
            for sig in FORWARDED.into_iter().chain([libc::SIGPIPE, libc::SIGCHLD]) {
                libc::signal(sig, libc::SIG_DFL);
            }
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            die_with_parent(guardian)
        });
    }
    let main = match cmd.spawn() {
        Ok(child) => child.id() as libc::pid_t,
        Err(err) => {
            let kind = match err.kind() {
                io::ErrorKind::NotFound => "not-found",
                io::ErrorKind::PermissionDenied => "denied",
                _ => "other",
            };
            let _ = writeln!(control, "spawn-error {kind} {err}");
            return Ok(());
        }
    };
    let _ = writeln!(control, "pid {main}");
    let job = Tree { main, own_group, main_exited: false };
    job.serve(&mut control, wakeups)
}

/// The command's process and everything under the guardian.
struct Tree {
    main: libc::pid_t,
    own_group: bool,
    main_exited: bool,
}

impl Tree {
    fn serve(mut self, control: &mut UnixStream, wakeups: libc::c_int) -> io::Result<()> {
        let mut pending = Vec::new();
        loop {
            let mut fds = [
                libc::pollfd { fd: control.as_raw_fd(), events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: wakeups, events: libc::POLLIN, revents: 0 },
            ];
            // SAFETY: `fds` is a valid array of two pollfd for the call's duration.
            let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if ready < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                self.kill_all(control);
                return Err(err);
            }
            if fds[1].revents != 0 {
                drain(wakeups);
                self.reap(control);
            }
            if fds[0].revents == 0 {
                continue;
            }
            let mut buf = [0u8; 256];
            let n = match control.read(&mut buf) {
                Ok(0) | Err(_) => {
                    // The CLI is gone: nobody renews the lease any more.
                    self.kill_all(control);
                    return Ok(());
                }
                Ok(n) => n,
            };
            pending.extend_from_slice(&buf[..n]);
            while let Some(end) = pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let line = String::from_utf8_lossy(&line[..end]).into_owned();
                if !self.obey(line.trim(), control) {
                    return Ok(());
                }
            }
        }
    }

    /// Carries out one request of the CLI; `false` once it said `end`.
    fn obey(&mut self, request: &str, control: &mut UnixStream) -> bool {
        match request.split_once(' ').unwrap_or((request, "")) {
            ("signal", n) => {
                if let Ok(sig) = n.parse() {
                    self.forward(sig);
                }
            }
            ("term", _) => {
                for pid in tree::live_descendants(self.fallback()) {
                    // SAFETY: kill(2) has no memory-safety preconditions.
                    unsafe { libc::kill(pid, libc::SIGTERM) };
                }
            }
            ("kill", _) => {
                let left = self.kill_all(control);
                let _ = writeln!(control, "count {left}");
            }
            ("count", _) => {
                self.reap(control);
                let _ = writeln!(control, "count {}", tree::live_descendants(self.fallback()).len());
            }
            ("end", _) => {
                self.kill_all(control);
                return false;
            }
            _ => {}
        }
        true
    }

    /// A signal the CLI forwards: to the command's group when it leads one, else to the
    /// command alone (while it has not been reaped: its pid may be another's by then).
    fn forward(&self, sig: libc::c_int) {
        let target = if self.own_group {
            -self.main
        } else if !self.main_exited {
            self.main
        } else {
            return;
        };
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe { libc::kill(target, sig) };
    }

    /// Reaps every exited child (the command, and orphans re-parented here), telling the CLI
    /// the command's status.
    fn reap(&mut self, control: &mut UnixStream) {
        loop {
            let mut status = 0;
            // SAFETY: `status` is a valid out-pointer.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid <= 0 {
                return;
            }
            if pid == self.main {
                self.main_exited = true;
                let _ = writeln!(control, "exit {status}");
            }
        }
    }

    /// SIGKILL to every process of the tree until none is left; how many are left.
    fn kill_all(&mut self, control: &mut UnixStream) -> usize {
        tree::kill_all(self.fallback(), || self.reap(control))
    }

    /// Where `/proc` cannot be read: the command's process group (or the command).
    fn fallback(&self) -> libc::pid_t {
        if self.own_group {
            -self.main
        } else {
            self.main
        }
    }
}

/// Names this process `fl-guardian` (its `comm`): `pkill fencedlock` and `killall fencedlock`,
/// meant for the CLI, then leave the guardian to clean up after it.
#[cfg(target_os = "linux")]
fn name_self() {
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"fl-guardian".as_ptr()) };
}

#[cfg(not(target_os = "linux"))]
fn name_self() {}

/// In the command, between fork and exec: it dies with the guardian.
#[cfg(target_os = "linux")]
fn die_with_parent(guardian: libc::pid_t) -> io::Result<()> {
    // SAFETY: prctl and getppid are async-signal-safe and take no pointers here.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
            return Err(io::Error::last_os_error());
        }
        // The guardian may have died between fork and prctl.
        if libc::getppid() != guardian {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_guardian: libc::pid_t) -> io::Result<()> {
    Ok(())
}

/// Ignores the forwarded signals and SIGPIPE; SIGCHLD writes to a self-pipe, whose read end
/// is returned for `poll`.
fn install_signals() -> io::Result<libc::c_int> {
    let mut pipe = [0; 2];
    // SAFETY: `pipe` is a valid two-element array.
    if unsafe { libc::pipe(pipe.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    for fd in pipe {
        set_cloexec(fd)?;
        // SAFETY: fcntl on a descriptor we own.
        unsafe { libc::fcntl(fd, libc::F_SETFL, libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK) };
    }
    CHILD_EXITED.store(pipe[1], Ordering::Relaxed);
    // SAFETY: installing dispositions: SIG_IGN, and a handler that only calls write(2).
    unsafe {
        for sig in FORWARDED.into_iter().chain([libc::SIGPIPE]) {
            libc::signal(sig, libc::SIG_IGN);
        }
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigchld as extern "C" fn(libc::c_int) as usize;
        action.sa_flags = libc::SA_RESTART | libc::SA_NOCLDSTOP;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(libc::SIGCHLD, &action, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(pipe[0])
}

fn drain(fd: libc::c_int) {
    let mut buf = [0u8; 64];
    // SAFETY: reads into a valid buffer of its length; the descriptor is non-blocking.
    while unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
}

fn set_cloexec(fd: libc::c_int) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor this process owns.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
