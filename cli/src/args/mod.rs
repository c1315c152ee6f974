//! Command-line arguments (clap derive). The options that say where the servers are and how
//! to print belong to the subcommands that use them (`ServerArgs`, `OutputArgs`); given before
//! the subcommand they are moved after it (`leading`), so `fencedlock --redis URL status k`
//! still works while `plan`, `man` and `completions` take none of them. The text after the
//! options, the exit-code table included, is in `help`.

pub mod help;
pub mod leading;

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};
use fencedlock::{KeyProblem, DEFAULT_CONFIRM_TIMEOUT, DEFAULT_NODE_TIMEOUT, MAX_LABEL_LEN, MAX_PERMITS};

use crate::duration;
use crate::error::code::BUSY as BUSY_EXIT;
use help::*;

/// The help heading of the server options.
const SERVER_OPTIONS: &str = "Server options";
/// The help heading of the output options.
const OUTPUT_OPTIONS: &str = "Output options";

/// Run a command under a distributed lease with a fencing token, so a job scheduled on many
/// hosts runs once
#[derive(Debug, Parser)]
#[command(name = "fencedlock", version, after_help = format!("{ROOT_AFTER}\n\n{}", exit_codes()))]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Where the lock servers are and how to reach them: for the subcommands that talk to them.
#[derive(Debug, Args)]
#[command(next_help_heading = SERVER_OPTIONS)]
pub struct ServerArgs {
    /// Lock server URL: redis://, rediss:// (TLS) or redis+sentinel://HOST:PORT[,HOST:PORT…]/SERVICE.
    /// Repeat it (or separate with commas before each scheme) for fenced Redlock over
    /// independent servers.
    #[arg(
        long = "redis",
        value_name = "URL",
        env = "FENCEDLOCK_REDIS",
        default_value = "redis://127.0.0.1:6379"
    )]
    pub redis: Vec<String>,

    /// The --redis URLs are nodes of one Redis Cluster (any of them will do): each key goes to
    /// its slot's primary, following slot moves. Without it, a cluster node answers MOVED for
    /// keys it does not own.
    #[arg(long, env = "FENCEDLOCK_CLUSTER")]
    pub cluster: bool,

    /// Which engine serves the leases: the module where a server has it and the Functions
    /// library elsewhere (auto, loading the library if missing or older), or only one of them.
    #[arg(long, value_enum, env = "FENCEDLOCK_ENGINE", default_value_t = EngineArg::Auto)]
    pub engine: EngineArg,

    /// Per-server request timeout, connecting included (the client library's default too).
    #[arg(long, value_name = "DURATION", default_value = default_timeout(), value_parser = duration::parse_timeout)]
    pub timeout: Duration,

    /// TLS for rediss:// servers.
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// How fencedlock prints: for every subcommand that prints results or notices.
#[derive(Debug, Args, Clone, Copy)]
#[command(next_help_heading = OUTPUT_OPTIONS)]
pub struct OutputArgs {
    /// Machine-readable output: one JSON object per result (on stderr for `run` and `elect`).
    #[arg(long)]
    pub json: bool,

    /// Print only errors (not the "skipped" notice).
    #[arg(short, long, conflicts_with = "verbose")]
    pub quiet: bool,

    /// More log detail on stderr (-v info, -vv debug, -vvv trace).
    #[arg(short, long, action = ArgAction::Count)]
    pub verbose: u8,
}

/// `--json` alone, for the subcommands that compute rather than talk to servers (`plan`,
/// `functions`): they log nothing and have no notices to silence.
#[derive(Debug, Args, Clone, Copy)]
#[command(next_help_heading = OUTPUT_OPTIONS)]
pub struct JsonArg {
    /// Machine-readable output: one JSON object per result.
    #[arg(long)]
    pub json: bool,
}

/// The client's [`DEFAULT_NODE_TIMEOUT`] as clap wants a default: text that lives forever.
fn default_timeout() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| duration::format(DEFAULT_NODE_TIMEOUT))
}

/// `--engine`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EngineArg {
    /// The module where it is loaded, else the Functions library (as a script where
    /// `FUNCTION` is denied).
    Auto,
    /// Only the module (`FENCEDLOCK.*` commands).
    Module,
    /// Only the Functions library (`FCALL fencedlock_*`).
    Functions,
    /// Only the Functions library's source as a script (`EVALSHA`), where `FUNCTION` is denied.
    Script,
}

impl EngineArg {
    /// As the client's option.
    pub fn choice(self) -> fencedlock::EngineChoice {
        use fencedlock::{Engine, EngineChoice};
        match self {
            EngineArg::Auto => EngineChoice::Auto,
            EngineArg::Module => EngineChoice::Only(Engine::Module),
            EngineArg::Functions => EngineChoice::Only(Engine::Functions),
            EngineArg::Script => EngineChoice::Only(Engine::Script),
        }
    }
}

/// `fencedlock functions`.
#[derive(Debug, Args)]
pub struct FunctionsArgs {
    /// Print it as a script instead, for servers that deny FUNCTION:
    /// `fencedlock functions --script | redis-cli -x SCRIPT LOAD`, then
    /// `EVALSHA sha numkeys key… fencedlock_acquire token ttl_ms …` (the function's name first).
    #[arg(long, conflicts_with = "floor_key")]
    pub script: bool,
    /// Print instead the keys a raw call on KEY must name after it: its slot's floor key and
    /// its wake-up list (the library refuses any other), e.g.
    /// `FCALL fencedlock_acquire 2 KEY FLOOR token ttl_ms`.
    #[arg(long, value_name = "KEY", value_parser = lock_key)]
    pub floor_key: Option<String>,
    /// How to print.
    #[command(flatten)]
    pub output: JsonArg,
}

/// `--tls-cacert`, `--tls-cert`, `--tls-key`: TLS settings for every `rediss://` server.
#[derive(Debug, Args)]
pub struct TlsArgs {
    /// PEM file of the certificate authority that signed the servers' certificates (instead
    /// of the system's). Only with rediss:// URLs.
    #[arg(long, value_name = "FILE", env = "FENCEDLOCK_TLS_CACERT")]
    pub tls_cacert: Option<PathBuf>,

    /// PEM client certificate for mutual TLS (with --tls-key).
    #[arg(long, value_name = "FILE", env = "FENCEDLOCK_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", env = "FENCEDLOCK_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run COMMAND while holding the lease on KEY (skip it if another owner holds it).
    #[command(after_help = format!("{RUN_AFTER}\n{RUN_POLICY}\n\n{}", exit_codes()))]
    Run(RunArgs),
    /// Take a lease and print its token and fence, for shell scripts.
    #[command(after_help = format!("{ACQUIRE_AFTER}\n\n{ACQUIRE_POLICY}\n\n{}", exit_codes()))]
    Acquire(AcquireArgs),
    /// Take a lease, print its fence, and keep it for the rest of a shell script.
    #[command(after_help = format!("{HOLD_AFTER}\n\n{}", exit_codes()))]
    Hold(HoldArgs),
    /// Extend a lease taken with `acquire`.
    #[command(after_help = format!("{RENEW_AFTER}\n\n{}", exit_codes()))]
    Renew(RenewArgs),
    /// End a lease taken with `acquire`.
    #[command(after_help = format!("{RELEASE_AFTER}\n\n{}", exit_codes()))]
    Release(ReleaseArgs),
    /// Show a key's fence, whether it is held, the time left and the holder's label.
    #[command(after_help = format!("{STATUS_AFTER}\n\n{}", exit_codes()))]
    Status(StatusArgs),
    /// List the held locks and semaphores (of a key prefix): fence, holders, labels, time left.
    #[command(visible_alias = "ls", after_help = format!("{LIST_AFTER}\n\n{}", exit_codes()))]
    List(ListArgs),
    /// Run COMMAND while this process leads the election NAME; stop it when leadership is lost.
    #[command(after_help = format!("{ELECT_AFTER}\n\n{}", exit_codes()))]
    Elect(ElectArgs),
    /// Print who leads the election NAME (label and epoch); --watch follows every change.
    #[command(after_help = format!("{LEADER_AFTER}\n\n{}", exit_codes()))]
    Leader(LeaderArgs),
    /// Size a lease: the freeze it absorbs, the failed renewals it tolerates, the recovery
    /// time after a crash, and the stale window of a longer pause.
    #[command(after_help = PLAN_AFTER)]
    Plan(PlanArgs),
    /// The billing demo: why only a fence checked by the resource stops a paused worker.
    /// Only in builds with the `demo` feature (it brings SQLite).
    #[command(after_help = format!("{DEMO_AFTER}\n\n{}", exit_codes()), hide = cfg!(not(feature = "demo")))]
    Demo(DemoArgs),
    /// Print the Functions library, the engine for servers that cannot load the module:
    /// `fencedlock functions | redis-cli -x FUNCTION LOAD REPLACE`.
    #[command(after_help = FUNCTIONS_AFTER)]
    Functions(FunctionsArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout.
    #[command(after_help = COMPLETIONS_AFTER)]
    Completions(CompletionsArgs),
    /// Print the manual page (roff) to stdout: fencedlock(1), or a subcommand's.
    #[command(after_help = MAN_AFTER)]
    Man(ManArgs),
}

impl Command {
    /// How this subcommand prints (`completions` and `man` print only what they generate).
    pub fn output(&self) -> OutputArgs {
        let quiet = OutputArgs { json: false, quiet: false, verbose: 0 };
        // `..quiet` below: only --json is theirs.
        match self {
            Command::Run(a) => a.output,
            Command::Acquire(a) => a.output,
            Command::Hold(a) => a.output,
            Command::Renew(a) => a.output,
            Command::Release(a) => a.output,
            Command::Status(a) => a.output,
            Command::List(a) => a.output,
            Command::Elect(a) => a.output,
            Command::Leader(a) => a.output,
            Command::Plan(a) => OutputArgs { json: a.output.json, ..quiet },
            Command::Demo(a) => a.output,
            Command::Functions(a) => OutputArgs { json: a.output.json, ..quiet },
            Command::Completions(_) | Command::Man(_) => quiet,
        }
    }
}

/// `fencedlock completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `fencedlock man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// A subcommand's page (fencedlock-run(1), ...) instead of fencedlock(1).
    #[arg(value_name = "SUBCOMMAND")]
    pub subcommand: Option<String>,
}

/// The lock key, as flock, `etcdctl lock` and `consul lock` take theirs: first and positional;
/// `--key` / `-k` (the older spelling) is accepted as well, one or the other.
#[derive(Debug, Args)]
#[group(id = "lock_key", required = true, multiple = false)]
pub struct KeyArg {
    /// The lock key (one job, one key); or give it as --key KEY.
    #[arg(value_name = "KEY", value_parser = lock_key)]
    positional: Option<String>,
    /// The lock key, as an option.
    #[arg(long = "key", short = 'k', value_name = "KEY", value_parser = lock_key)]
    flag: Option<String>,
}

/// A lock key the clients accept: an empty one is most often an unset shell variable (a
/// crontab's `run "$JOB"`), and every job with one would share a single lock.
fn lock_key(key: &str) -> Result<String, String> {
    match fencedlock::check_key(key) {
        Ok(()) => Ok(key.to_owned()),
        Err(KeyProblem::Empty) => Err(
            "the lock key is empty: a variable that is unset (or empty) where the key comes from expands to nothing; set it, or name the key".into(),
        ),
        Err(problem) => Err(format!("{problem} ({key:?})")),
    }
}

impl KeyArg {
    /// The key, whichever way it was given (clap's group makes it exactly one).
    pub fn name(&self) -> &str {
        self.positional.as_deref().or(self.flag.as_deref()).unwrap_or_default()
    }
}

/// `fencedlock run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The lock key.
    #[command(flatten)]
    pub key: KeyArg,
    /// Lease time; renewed every ttl/3 while the command runs (500ms, 30s, 5m, 1h, 1d).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration::parse_ttl)]
    pub ttl: Duration,
    /// If the lock is busy, wait up to this long instead of skipping: in the server's queue,
    /// handed the lock as the holder releases it (polling with jittered backoff where the
    /// server's module is too old to wait). flock's -w; a unit is required (-w 10s).
    #[arg(long, short = 'w', value_name = "DURATION", default_value = "0s", value_parser = duration::parse)]
    pub wait: Duration,
    /// Do not wait for a busy lock: skip at once (the default; flock's -n, for scripts that
    /// spell it out).
    #[arg(long, short = 'n', conflicts_with = "wait")]
    pub nonblock: bool,
    /// An exclusive (write) lease: flock's -x, the default, accepted as such.
    #[arg(long, short = 'x', conflicts_with = "shared")]
    pub exclusive: bool,
    /// A shared (read) lease, flock's -s: held together with other --shared runs; an
    /// exclusive run waits for them all, and they for it (one server or one Redis Cluster).
    #[arg(long, short = 's')]
    pub shared: bool,
    /// Exit with N instead of 75 when the lock is busy (skipped, or --wait ran out), as
    /// flock's -E: e.g. 0 for a cron job whose skip is no failure.
    #[arg(long, short = 'E', value_name = "N", default_value_t = BUSY_EXIT)]
    pub conflict_exit_code: u8,
    /// After SIGTERM on a lost lease, wait this long before SIGKILL.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration::parse)]
    pub kill_grace: Duration,
    /// Keep the lease at least this long after it was granted, even if the command ends
    /// sooner, so hosts whose cron fires a few seconds late skip this period's run.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = duration::parse)]
    pub min_hold: Duration,
    /// Run the command at most once per this period across every host that runs it for the
    /// key, measured on the server's clock: a host that finds the last counted run less than
    /// a period old skips, as for a busy lock (exit 75, or -E N). A run counts once the
    /// command exits 0 (see --count-failures); the key's record shows it in `status`.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse_timeout)]
    pub every: Option<Duration>,
    /// With --every: count a run that exited non-zero too (by default a failed run is tried
    /// again by the next host whose schedule fires).
    #[arg(long, requires = "every")]
    pub count_failures: bool,
    /// When the lock service cannot answer: fail (exit 69), skip (exit 75), or run the
    /// command without the lock (see below).
    #[arg(long, value_name = "POLICY", value_enum, default_value_t = OnUnavailable::Fail)]
    pub on_unavailable: OnUnavailable,
    /// Replica confirmation of the grant.
    #[command(flatten)]
    pub confirm: ConfirmArgs,
    /// Permits.
    #[command(flatten)]
    pub permits: PermitsArg,
    /// The lease's public label.
    #[command(flatten)]
    pub label: LabelArg,
    /// The command.
    #[command(flatten)]
    pub command: CommandArg,
    /// Where the servers are.
    #[command(flatten)]
    pub server: ServerArgs,
    /// How to print.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// The command `run` and `elect` start: after `--`, or a shell string with `-c`.
#[derive(Debug, Args)]
pub struct CommandArg {
    /// Run this string with `sh -c` instead of a command after `--` (flock's -c), for
    /// pipes, redirections and $FENCEDLOCK_FENCE expansions.
    #[arg(short = 'c', long = "command", value_name = "STRING", conflicts_with = "argv")]
    pub shell: Option<OsString>,
    /// The command and its arguments, after `--`.
    #[arg(id = "argv", last = true, required_unless_present = "shell", num_args = 1.., value_name = "COMMAND")]
    pub argv: Vec<OsString>,
}

impl CommandArg {
    /// The program and its arguments: those after `--`, or `sh -c STRING` for `-c`.
    pub fn argv(&self) -> Vec<OsString> {
        match &self.shell {
            Some(script) => vec!["sh".into(), "-c".into(), script.clone()],
            None => self.argv.clone(),
        }
    }
}

/// `--label` / `--no-label`: the public label a lease carries, shown by `status`, `list` and
/// `leader` to anyone who may read the key.
#[derive(Debug, Args, Clone)]
pub struct LabelArg {
    /// A public label for the lease, shown by status, list and leader (never put a secret in
    /// it; 1 to 256 bytes). Default: this host's name and fencedlock's pid, HOST:PID. An empty
    /// label ('') is none, as --no-label.
    #[arg(long, value_name = "TEXT", value_parser = label, conflicts_with = "no_label")]
    pub label: Option<String>,
    /// Take the lease without a label.
    #[arg(long)]
    pub no_label: bool,
}

impl LabelArg {
    /// The label to send: the one given, none (`--no-label`, `--label ''`), or `HOST:PID`.
    pub fn value(&self) -> Option<String> {
        match (&self.label, self.no_label) {
            (_, true) => None,
            (Some(given), false) => (!given.is_empty()).then(|| given.clone()),
            (None, false) => Some(default_label()),
        }
    }
}

/// `HOST:PID`: who holds a lease, as an operator looking at `status` wants to know it.
fn default_label() -> String {
    let mut name = [0u8; 256];
    // SAFETY: gethostname writes at most `name.len()` bytes into the buffer it is given.
    let rc = unsafe { libc::gethostname(name.as_mut_ptr().cast(), name.len()) };
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    let host = if rc == 0 && end > 0 {
        String::from_utf8_lossy(&name[..end]).into_owned()
    } else {
        "localhost".into()
    };
    let label = format!("{host}:{}", std::process::id());
    // A host name near 255 bytes would make the label too long: keep its end (the pid).
    match label.len() <= MAX_LABEL_LEN {
        true => label,
        false => label[label.len() - MAX_LABEL_LEN..].to_owned(),
    }
}

/// A label the protocol accepts (at most its length; empty means none).
fn label(text: &str) -> Result<String, String> {
    if text.len() > MAX_LABEL_LEN {
        return Err(format!("a label has at most {MAX_LABEL_LEN} bytes, this one {}", text.len()));
    }
    Ok(text.to_owned())
}

/// `fencedlock acquire`.
#[derive(Debug, Args)]
pub struct AcquireArgs {
    /// The lock key.
    #[command(flatten)]
    pub key: KeyArg,
    /// Lease time (500ms, 30s, 5m, 1h, 1d).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration::parse_ttl)]
    pub ttl: Duration,
    /// If the lock is busy, wait up to this long instead of failing with 75 (in the server's
    /// queue, like `run --wait`; flock's -w).
    #[arg(long, short = 'w', value_name = "DURATION", default_value = "0s", value_parser = duration::parse)]
    pub wait: Duration,
    /// Write the token to this file (mode 0600) instead of printing it.
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,
    /// When the lock service cannot answer: fail (exit 69) or skip (exit 75).
    #[arg(long, value_name = "POLICY", value_enum, default_value_t = AcquireOnUnavailable::Fail)]
    pub on_unavailable: AcquireOnUnavailable,
    /// Replica confirmation of the grant.
    #[command(flatten)]
    pub confirm: ConfirmArgs,
    /// Permits.
    #[command(flatten)]
    pub permits: PermitsArg,
    /// The lease's public label.
    #[command(flatten)]
    pub label: LabelArg,
    /// Where the servers are.
    #[command(flatten)]
    pub server: ServerArgs,
    /// How to print.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `fencedlock hold`.
#[derive(Debug, Args)]
pub struct HoldArgs {
    /// The lock key.
    #[command(flatten)]
    pub key: KeyArg,
    /// Lease time; renewed every ttl/3 while held (500ms, 30s, 5m, 1h, 1d).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration::parse_ttl)]
    pub ttl: Duration,
    /// If the lock is busy, wait up to this long instead of failing with 75 (flock's -w).
    #[arg(long, short = 'w', value_name = "DURATION", default_value = "0s", value_parser = duration::parse)]
    pub wait: Duration,
    /// When the lock service cannot answer: fail (exit 69) or skip (exit 75).
    #[arg(long, value_name = "POLICY", value_enum, default_value_t = AcquireOnUnavailable::Fail)]
    pub on_unavailable: AcquireOnUnavailable,
    /// The signal sent to the shell that started hold when the lease is lost: a name (TERM,
    /// USR1, ...) or number, or none.
    #[arg(long, value_name = "SIGNAL", default_value = "TERM", value_parser = loss_signal)]
    pub signal: LossSignal,
    /// Watch this process instead of hold's parent: the lease is released when it exits, and
    /// it gets --signal on a loss.
    #[arg(long, value_name = "PID")]
    pub pid: Option<i32>,
    /// Permits.
    #[command(flatten)]
    pub permits: PermitsArg,
    /// The lease's public label.
    #[command(flatten)]
    pub label: LabelArg,
    /// Where the servers are.
    #[command(flatten)]
    pub server: ServerArgs,
    /// How to print.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `hold --signal`: the signal a lost lease sends to the shell, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LossSignal(pub Option<i32>);

/// A signal by name (`TERM`, `SIGTERM`, `usr1`), number, or `none`.
fn loss_signal(text: &str) -> Result<LossSignal, String> {
    const NAMES: [(&str, i32); 8] = [
        ("HUP", libc::SIGHUP),
        ("INT", libc::SIGINT),
        ("QUIT", libc::SIGQUIT),
        ("KILL", libc::SIGKILL),
        ("USR1", libc::SIGUSR1),
        ("USR2", libc::SIGUSR2),
        ("ALRM", libc::SIGALRM),
        ("TERM", libc::SIGTERM),
    ];
    let upper = text.trim().to_ascii_uppercase();
    if upper == "NONE" || upper == "0" {
        return Ok(LossSignal(None));
    }
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    if let Some((_, number)) = NAMES.iter().find(|(n, _)| *n == name) {
        return Ok(LossSignal(Some(*number)));
    }
    match upper.parse::<i32>() {
        Ok(number) if (1..=64).contains(&number) => Ok(LossSignal(Some(number))),
        _ => Err(format!(
            "unknown signal {text:?}: use one of TERM, INT, HUP, QUIT, USR1, USR2, ALRM, KILL, a number, or none"
        )),
    }
}

/// `fencedlock list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only keys that start with this (all keys without it); matched as text, not a pattern.
    #[arg(value_name = "PREFIX", default_value = "")]
    pub prefix: String,
    /// Show lock keys nobody holds too (their fence).
    #[arg(long)]
    pub all: bool,
    /// How many keys each SCAN call looks at (its COUNT): the server's work per call.
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub count: u64,
    /// Stop after the servers looked at about this many keys (SCAN calls × --count), and say
    /// the listing is incomplete.
    #[arg(long, value_name = "N", default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_scan: u64,
    /// Where the servers are.
    #[command(flatten)]
    pub server: ServerArgs,
    /// How to print.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `fencedlock elect`.
#[derive(Debug, Args)]
pub struct ElectArgs {
    /// The election's key.
    #[command(flatten)]
    pub key: KeyArg,
    /// Leadership lease time; renewed every ttl/3 while the command runs. A leader that dies
    /// is replaced after at most this long.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration::parse_ttl)]
    pub ttl: Duration,
    /// After SIGTERM on lost leadership, wait this long before SIGKILL.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration::parse)]
    pub kill_grace: Duration,
    /// The leader's public label.
    #[command(flatten)]
    pub label: LabelArg,
    /// The command.
    #[command(flatten)]
    pub command: CommandArg,
    /// Where the servers are.
    #[command(flatten)]
    pub server: ServerArgs,
    /// How to print.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `fencedlock leader`.
#[derive(Debug, Args)]
pub struct LeaderArgs {
    /// The election's key.
    #[command(flatten)]
    pub key: KeyArg,
    /// Print a line at each change of leader, until interrupted.
    #[arg(long)]
    pub watch: bool,
    /// How often --watch polls (at least 10ms).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = duration::parse_timeout, requires = "watch")]
    pub interval: Duration,
    /// Where the servers are.
    #[command(flatten)]
    pub server: ServerArgs,
    /// How to print.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `--permits`, for `run` and `acquire`.
#[derive(Debug, Clone, Copy, Args)]
pub struct PermitsArg {
    /// Let up to N holders have the key at once (a fenced semaphore), each with its own lease
    /// and fence; 1 is the ordinary lock. Every holder of a key must use the same N. Needs a
    /// single --redis server: a Redlock majority cannot bound the holders.
    #[arg(long = "permits", value_name = "N", default_value_t = 1, value_parser = permits_range())]
    pub count: u32,
}

/// 1 to the protocol's [`MAX_PERMITS`], for clap (out of range: a usage error, exit 64).
fn permits_range() -> clap::builder::RangedU64ValueParser<u32> {
    clap::builder::RangedU64ValueParser::<u32>::new().range(1..=u64::from(MAX_PERMITS))
}

/// `run --on-unavailable`: what to do when the lock service cannot answer
/// ([`fencedlock::Error::is_unavailable`]); every other error fails regardless.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnUnavailable {
    /// Exit 69 without running the command (fail closed).
    Fail,
    /// Exit 75 with a notice, as for a busy lock.
    Skip,
    /// Run the command without the lock, FENCEDLOCK_FENCE unset, with a warning (fail open).
    Run,
}

/// `acquire --on-unavailable`: `run`'s choices minus running, since acquire runs nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AcquireOnUnavailable {
    /// Exit 69.
    Fail,
    /// Exit 75 with a notice, as for a busy lock.
    Skip,
}

/// `--confirm-replicas` / `--confirm-timeout`, for `run` and `acquire`.
#[derive(Debug, Clone, Copy, Args)]
pub struct ConfirmArgs {
    /// Confirm each grant on N replicas of the server (WAIT) before using it, so a failover to
    /// one of them keeps the lease. A grant not confirmed in time is released and counts as
    /// the lock service not answering (exit 69, or --on-unavailable).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub confirm_replicas: usize,
    /// How long a grant waits for its replica confirmations.
    #[arg(long, value_name = "DURATION", default_value = default_confirm_timeout(), value_parser = duration::parse)]
    pub confirm_timeout: Duration,
}

/// The client's [`DEFAULT_CONFIRM_TIMEOUT`] as clap wants a default: text that lives forever.
fn default_confirm_timeout() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| duration::format(DEFAULT_CONFIRM_TIMEOUT))
}

/// `fencedlock plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Lease time.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration::parse_ttl)]
    pub ttl: Duration,
    /// Renewal interval (default: what `run` uses, ttl/3).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    pub renew_every: Option<Duration>,
    /// A stall to check against the lease (GC pause, VM freeze, suspend).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    pub pause: Option<Duration>,
    /// How to print.
    #[command(flatten)]
    pub output: JsonArg,
}

/// Where `renew` / `release` find the token.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct TokenSource {
    /// The token printed by `acquire` (visible in `ps`; prefer --token-file or FENCEDLOCK_TOKEN).
    #[arg(long, value_name = "TOKEN", env = "FENCEDLOCK_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// A file written by `acquire --token-file`.
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,
}

/// `fencedlock renew`.
#[derive(Debug, Args)]
pub struct RenewArgs {
    /// The lock key.
    #[command(flatten)]
    pub key: KeyArg,
    /// New lease time, counted from now (500ms, 30s, 5m, 1h, 1d). Required: the server
    /// keeps the lease's deadline, not the ttl it was granted with.
    #[arg(long, value_name = "DURATION", required = true, value_parser = duration::parse_ttl)]
    pub ttl: Duration,
    /// The lease's token.
    #[command(flatten)]
    pub token: TokenSource,
    /// Where the servers are.
    #[command(flatten)]
    pub server: ServerArgs,
    /// How to print.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `fencedlock release`.
#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// The lock key.
    #[command(flatten)]
    pub key: KeyArg,
    /// The lease's token.
    #[command(flatten)]
    pub token: TokenSource,
    /// Where the servers are.
    #[command(flatten)]
    pub server: ServerArgs,
    /// How to print.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `fencedlock status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The lock key.
    #[command(flatten)]
    pub key: KeyArg,
    /// Where the servers are.
    #[command(flatten)]
    pub server: ServerArgs,
    /// How to print.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `fencedlock demo`.
#[derive(Debug, Args)]
#[cfg_attr(not(feature = "demo"), allow(dead_code))]
pub struct DemoArgs {
    /// The invoice lock's key.
    #[arg(long, short, default_value = "invoice:inv_72")]
    pub key: String,
    /// Each worker's lease time; the stalled worker pauses longer than this.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = duration::parse_ttl)]
    pub ttl: Duration,
    /// Run the same race without the fence check in the UPDATE, and watch the double send.
    #[arg(long)]
    pub no_fence: bool,
    /// The other ordering: the stale write reaches the table after the new owner read the
    /// invoice, before its first write (accepted unless --claim: exit 65).
    #[arg(long)]
    pub stale_first: bool,
    /// Each new owner first claims the row: raises last_fence to its fence in the statement
    /// that reads the invoice, so the stale write is refused wherever it lands.
    #[arg(long)]
    pub claim: bool,
    /// The SQLite database file (default: a temporary file, removed afterwards).
    #[arg(long, value_name = "PATH")]
    pub db: Option<PathBuf>,
    /// A PostgreSQL database instead of SQLite: postgres://USER[:PASSWORD]@HOST[:PORT]/DB. The
    /// demo's tables go in a schema of its own, `fencedlock_demo`, dropped and created anew.
    #[arg(long, value_name = "URL", conflicts_with = "db", value_parser = postgres_url)]
    pub database: Option<String>,
    /// Where the servers are.
    #[command(flatten)]
    pub server: ServerArgs,
    /// How to print.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `--database`: a PostgreSQL URL (the demo speaks no other database over a URL).
#[cfg_attr(not(feature = "demo"), allow(dead_code))]
fn postgres_url(url: &str) -> Result<String, String> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(url.to_owned())
    } else {
        Err("expected a PostgreSQL URL, postgres://USER@HOST[:PORT]/DB (SQLite is the default: --db PATH)"
            .into())
    }
}
