//! Helpers shared by the CLI tests: the real `fencedlock` binary, run with a clean
//! environment and a hang guard, against real servers started by the harness. Lock state is
//! read with the harness (`Server::lock_status`, `Server::lock_held`).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

pub use harness::Server;

/// The exit codes the CLI documents (sysexits), spelled out here rather than taken from the
/// binary's source: scripts rely on these numbers, so the tests pin them.
pub const USAGE: i32 = 64;
/// `demo`: the invoice was sent more than once.
#[cfg_attr(not(feature = "demo"), allow(dead_code))]
pub const INVARIANT_VIOLATED: i32 = 65;
/// No server (or no majority) answered.
pub const UNAVAILABLE: i32 = 69;
/// Another holder has the lock: `acquire` is busy...
pub const BUSY: i32 = 75;
/// ...and `run` skips its command.
pub const SKIPPED: i32 = BUSY;
/// The lease ended before the command or script was done with it.
pub const LEASE_LOST: i32 = 76;
/// The TLS certificates do not match the server's (`EX_CONFIG`).
pub const CONFIG: i32 = 78;

/// Generous upper bound for one CLI invocation: only catches hangs.
pub const HANG: Duration = Duration::from_secs(30);

/// The binary under test, with no inherited fencedlock settings.
pub fn fencedlock() -> Command {
    without_settings(Command::new(env!("CARGO_BIN_EXE_fencedlock")))
}

/// `PREFIX... fencedlock`, as [`fencedlock`]: the binary started by a wrapper that changes
/// its process (`faketime -f -2h` skews its clock), which the wrapper must start itself.
pub fn fencedlock_under(prefix: &[&str]) -> Command {
    let (wrapper, args) = prefix.split_first().expect("a wrapper command");
    let mut cmd = Command::new(wrapper);
    cmd.args(args).arg(env!("CARGO_BIN_EXE_fencedlock"));
    without_settings(cmd)
}

fn without_settings(mut cmd: Command) -> Command {
    for var in [
        "FENCEDLOCK_REDIS",
        "FENCEDLOCK_TOKEN",
        "FENCEDLOCK_LOG",
        "FENCEDLOCK_KEY",
        "FENCEDLOCK_FENCE",
        "FENCEDLOCK_TLS_CACERT",
        "FENCEDLOCK_TLS_CERT",
        "FENCEDLOCK_TLS_KEY",
    ] {
        cmd.env_remove(var);
    }
    cmd.stdin(Stdio::null());
    cmd
}

/// What a finished invocation left behind.
#[derive(Debug)]
pub struct Outcome {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Outcome {
    /// The exit code; panics (with the output) if the process died from a signal.
    pub fn code(&self) -> i32 {
        self.code.unwrap_or_else(|| panic!("killed by a signal: {self:?}"))
    }

    /// The stderr lines.
    pub fn stderr_lines(&self) -> Vec<&str> {
        self.stderr.lines().collect()
    }
}

/// A started invocation whose output is collected in the background.
pub struct Running {
    pub child: Child,
    started: Instant,
    out: thread::JoinHandle<String>,
    err: thread::JoinHandle<String>,
}

impl Running {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Whether it is still running.
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// Waits (at most `limit`, else kills it and panics) and collects the output.
    pub fn finish_within(mut self, limit: Duration) -> Outcome {
        let Some(status) = wait_timeout(&mut self.child, limit) else {
            let _ = self.child.kill();
            let _ = self.child.wait();
            let stderr = self.err.join().unwrap_or_default();
            panic!("fencedlock did not finish within {limit:?}; stderr:\n{stderr}");
        };
        Outcome {
            code: status.code(),
            stdout: self.out.join().expect("stdout reader"),
            stderr: self.err.join().expect("stderr reader"),
            elapsed: self.started.elapsed(),
        }
    }

    pub fn finish(self) -> Outcome {
        self.finish_within(HANG)
    }

    /// Sends a signal to the fencedlock process.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(self.pid(), sig) };
        assert_eq!(rc, 0, "kill({}, {sig})", self.pid());
    }
}

/// Starts `fencedlock ARGS` with piped output.
pub fn spawn(args: &[&str]) -> Running {
    spawn_cmd(fencedlock().args(args))
}

pub fn spawn_cmd(cmd: &mut Command) -> Running {
    let mut child =
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start the fencedlock binary");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    Running {
        child,
        started: Instant::now(),
        out: thread::spawn(move || {
            let mut s = String::new();
            let _ = stdout.read_to_string(&mut s);
            s
        }),
        err: thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        }),
    }
}

/// Starts `fencedlock run --redis URL OPTIONS -- sh -c SCRIPT`: a shell script under a lease.
pub fn spawn_sh_under_run(url: &str, options: &[&str], script: &str) -> Running {
    let mut args = vec!["run", "--redis", url];
    args.extend(options);
    args.extend(["--", "sh", "-c", script]);
    spawn(&args)
}

/// A shell command for `sh -c` in a scratch `dir` of its own: it creates `started` once it is
/// ready, and reports to `out` (what it reports is the constructor's to say).
pub struct ShellCommand {
    pub dir: tempfile::TempDir,
    pub started: PathBuf,
    pub out: PathBuf,
    pub script: String,
}

impl ShellCommand {
    /// `script(out, started)` with `out` named `out_name`.
    fn new(out_name: &str, script: impl FnOnce(&str, &str) -> String) -> ShellCommand {
        let dir = scratch();
        let (started, out) = (p(dir.path(), "started"), p(dir.path(), out_name));
        let script = script(&out.display().to_string(), &started.display().to_string());
        ShellCommand { dir, started, out, script }
    }
}

/// Ignores SIGTERM and runs a child that does not end by itself (only SIGKILL to the group
/// stops them); writes both pids to `out`.
pub fn stubborn_command() -> ShellCommand {
    ShellCommand::new("pids", |pids, started| {
        format!("trap '' TERM; sleep 60 & echo $$ $! > '{pids}'; touch '{started}'; wait")
    })
}

/// Handles SIGTERM: writes `TERM` to `out` and exits with `code`; otherwise ends by itself
/// after 30 s.
pub fn term_recording_command(code: u8) -> ShellCommand {
    ShellCommand::new("term", |term, started| {
        format!(
            "trap \"echo TERM > '{term}'; exit {code}\" TERM; touch '{started}'; i=0; while [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done"
        )
    })
}

/// Writes its pid to `out` and sleeps 30 s as that process: a plain command, no traps.
pub fn sleeping_command() -> ShellCommand {
    ShellCommand::new("pid", |pid, started| format!("echo $$ > '{pid}'; touch '{started}'; exec sleep 30"))
}

/// `command` under `fencedlock run --redis SERVER OPTIONS`, once it has started.
pub fn started_under_run(server: &Server, options: &[&str], command: &ShellCommand) -> Running {
    let run = spawn_sh_under_run(&server.url(), options, &command.script);
    wait_for_file(&command.started, HANG);
    run
}

/// Runs `fencedlock ARGS` to completion.
pub fn run(args: &[&str]) -> Outcome {
    spawn(args).finish()
}

/// Runs `fencedlock --cluster --redis SEED ARGS` against `cluster`, with one node's URL as the
/// seed (it tells the client about the others). The global options come first: after `run`'s
/// `--` they would be the command's.
pub fn run_on_cluster(cluster: &harness::Cluster, args: &[&str]) -> Outcome {
    let seed = cluster.urls()[0].clone();
    let mut all = vec!["--cluster", "--redis", seed.as_str()];
    all.extend(args);
    run(&all)
}

/// The lease `acquire` printed: its `TOKEN FENCE` line.
pub fn printed_lease(out: &Outcome) -> (String, u64) {
    let words: Vec<&str> = out.stdout.split_whitespace().collect();
    let [token, fence] = words[..] else { panic!("expected TOKEN FENCE: {out:?}") };
    (token.to_owned(), fence.parse().unwrap_or_else(|_| panic!("a fence: {out:?}")))
}

/// The fences the commands appended to `path`, one a line (`echo $FENCEDLOCK_FENCE >> FILE`),
/// in the order they ran.
pub fn fences_written(path: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().map(|l| l.parse().unwrap_or_else(|_| panic!("a fence: {l:?}"))).collect()
}

fn wait_timeout(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Polls until `path` exists; panics after `limit`.
pub fn wait_for_file(path: &Path, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !path.exists() {
        assert!(Instant::now() < deadline, "{} did not appear within {limit:?}", path.display());
        thread::sleep(Duration::from_millis(10));
    }
}

/// A shell command (for `sh -c`) that creates `started`, then waits (bounded, ~30 s) for
/// `go` to exist.
pub fn hold_until(started: &Path, go: &Path) -> String {
    format!(
        "touch '{}'; i=0; while [ ! -e '{}' ] && [ $i -lt 1500 ]; do sleep 0.02; i=$((i+1)); done",
        started.display(),
        go.display()
    )
}

/// A fresh scratch directory.
pub fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("fencedlock-cli-test-").tempdir().expect("tempdir")
}

/// `dir/name` as a string, for shell commands.
pub fn p(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

/// Asserts the invocation failed with `code` and exactly one stderr line containing every
/// fragment in `needles`.
pub fn assert_one_line_error(outcome: &Outcome, code: i32, needles: &[&str]) {
    assert_eq!(outcome.code(), code, "{outcome:?}");
    let lines = outcome.stderr_lines();
    assert_eq!(lines.len(), 1, "expected one stderr line: {outcome:?}");
    assert!(lines[0].starts_with("fencedlock: error: "), "{outcome:?}");
    for needle in needles {
        assert!(lines[0].contains(needle), "missing {needle:?} in {:?}", lines[0]);
    }
}

/// Whether a pid names a live (not zombie) process.
pub fn alive(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").split_whitespace().next().unwrap_or("");
            state != "Z" && state != "X"
        }
        Err(_) => false,
    }
}
