//! Starting a server process, signals and bounded waits on it.

use std::ffi::OsStr;
use std::fs::OpenOptions;
use std::io;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// Where a server's stdout and stderr go, in its directory (start-up errors land here before
/// its own log file exists).
pub const STDIO_FILE: &str = "stdio.log";

/// Starts `binary` with `args` in `dir`, no stdin, stdout and stderr appended to
/// [`STDIO_FILE`] there.
pub fn spawn(binary: &Path, args: &[&OsStr], dir: &Path) -> io::Result<Child> {
    let stdio = OpenOptions::new().create(true).append(true).open(dir.join(STDIO_FILE))?;
    Command::new(binary)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::from(stdio.try_clone()?))
        .stderr(Stdio::from(stdio))
        .spawn()
}

/// Send `signal` to the child (ignored if it has already exited).
pub fn signal(child: &Child, signal: libc::c_int) {
    let Ok(pid) = libc::pid_t::try_from(child.id()) else { return };
    // SAFETY: kill(2) has no memory-safety preconditions; `pid` is our own child, not yet
    // reaped (we hold its `Child`), so it cannot name an unrelated process.
    unsafe {
        libc::kill(pid, signal);
    }
}

/// Wait up to `limit` for the child to exit.
pub fn wait_timeout(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => sleep(Duration::from_millis(10)),
            _ => return None,
        }
    }
}

/// SIGCONT (a paused process cannot die cleanly otherwise) then SIGKILL, and reap it.
pub fn kill_and_reap(child: &mut Child) {
    signal(child, libc::SIGCONT);
    signal(child, libc::SIGKILL);
    let _ = wait_timeout(child, Duration::from_secs(10));
}
