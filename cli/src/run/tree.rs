//! The processes under this one, found by their parent links and killed until none is left.
//! The guardian kills the command's tree with it when fencedlock dies; fencedlock kills what
//! is left under it when the guardian dies first. Both are child subreapers: a process whose
//! parent dies comes to them, not to init, so nothing of the tree leaves it by `setsid` or a
//! double fork.

use std::io;
use std::time::{Duration, Instant};

/// How long a kill of the tree may take: a process in uninterruptible sleep dies when it
/// leaves it; past this the count of what is left is reported.
const KILL_LIMIT: Duration = Duration::from_secs(2);

/// Orphans of this process's tree come to it (`PR_SET_CHILD_SUBREAPER`).
#[cfg(target_os = "linux")]
pub fn become_subreaper() -> io::Result<()> {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer flag.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
pub fn become_subreaper() -> io::Result<()> {
    Ok(())
}

/// The processes under this one that still run (zombies left out), by the parent links in
/// `/proc`, strays re-parented here included.
#[cfg(target_os = "linux")]
pub fn live_descendants(_fallback: libc::pid_t) -> Vec<libc::pid_t> {
    let me = std::process::id() as libc::pid_t;
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut procs = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<libc::pid_t>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
        let Some(rest) = stat.rfind(')').map(|at| &stat[at + 1..]) else { continue };
        let mut fields = rest.split_whitespace();
        let (Some(state), Some(Ok(ppid))) = (fields.next(), fields.next().map(str::parse::<libc::pid_t>))
        else {
            continue;
        };
        procs.push((pid, ppid, state != "Z" && state != "X"));
    }
    let mut tree = vec![me];
    let mut at = 0;
    while at < tree.len() {
        let parent = tree[at];
        tree.extend(procs.iter().filter(|(_, ppid, _)| *ppid == parent).map(|(pid, _, _)| *pid));
        at += 1;
    }
    tree.into_iter().skip(1).filter(|pid| procs.iter().any(|(p, _, live)| p == pid && *live)).collect()
}

/// Without `/proc`: `fallback` (a pid, or a process group as `-pgid`) while it exists.
#[cfg(not(target_os = "linux"))]
pub fn live_descendants(fallback: libc::pid_t) -> Vec<libc::pid_t> {
    // SAFETY: signal 0 only checks for existence.
    if unsafe { libc::kill(fallback, 0) } == 0 {
        vec![fallback]
    } else {
        Vec::new()
    }
}

/// SIGKILL to every process of the tree until none is left (or [`KILL_LIMIT`]), calling
/// `reap` between rounds; how many are left. A process that forks while being killed leaves
/// an orphan, which comes here and is killed in the next round.
pub fn kill_all(fallback: libc::pid_t, mut reap: impl FnMut()) -> usize {
    let deadline = Instant::now() + KILL_LIMIT;
    loop {
        let live = live_descendants(fallback);
        if live.is_empty() || Instant::now() >= deadline {
            return live.len();
        }
        for pid in &live {
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(2));
        reap();
    }
}
