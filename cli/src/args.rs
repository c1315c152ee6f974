//! Command-line arguments (clap derive), with the examples and exit codes shown by `--help`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};
use fencedlock::{KeyProblem, DEFAULT_CONFIRM_TIMEOUT, MAX_PERMITS};

use crate::duration;
use crate::error::code::BUSY as BUSY_EXIT;

/// The exit codes, as `--help` shows them.
pub const EXIT_CODES: &str = "\
Exit codes:
  0        success (run: the command exited 0; demo: the invariant held)
  1-255    run: the command's own exit code; 128+N if it died from signal N
  64       usage: bad option, duration, URL or token file; ttl out of range; key of another
           type; --permits out of range, with several servers, or another count than the key's
  65       demo: invariant violated (the double send --no-fence and --stale-first show)
  69       unavailable: server unreachable, timing out, loading, out of memory or in its
           restart grace; grant not confirmed by --confirm-replicas; no majority (these are
           what --on-unavailable decides); module not loaded; commands or key denied by ACL;
           wrong password or user (give them in the URL: redis://USER:PASSWORD@HOST:PORT)
  70       internal: unexpected server reply
  74       the token file could not be written (the lease is given back at once), or stdout
           (completions, man)
  75       busy: another owner holds the lock (skipped, or --wait ran out; run
           --conflict-exit-code N picks another code); a server that cannot answer under
           --on-unavailable skip
  76       lease lost: run terminated the command; renew/release found the lease gone
  78       TLS: the server's certificate does not verify against --tls-cacert, or the server
           refused the client certificate. Not 69: no retry or --on-unavailable policy can
           fix a certificate
  126/127  run: the command is not executable / not found";

const ROOT_AFTER: &str = "\
Examples:
  fencedlock run nightly-report --ttl 30s -- ./report.sh
  fencedlock run nightly-report -c './report.sh > /var/log/report.log'
  fencedlock run --key backup --ttl 5m --wait 1m --redis redis://lock1:6379 -- backup.sh
  fencedlock run --key sync --redis redis://a:6379,redis://b:6379,redis://c:6379 -- sync.sh
  fencedlock status nightly-report --json
  fencedlock plan --ttl 30s --renew-every 10s --pause 45s

One --redis (or FENCEDLOCK_REDIS) is a single-server lease; several are fenced Redlock
(a majority must grant, and the fence still increases across grants).
Log detail: -v / -vv / -vvv, or FENCEDLOCK_LOG=debug.";

const RUN_AFTER: &str = "\
KEY comes first, as with flock, `etcdctl lock` and `consul lock` (--key KEY works too). Unlike
them, a busy lock is skipped at once (exit 75, or --conflict-exit-code N) unless --wait says
how long to wait: one cron line on many hosts runs the job on one of them.
The command gets FENCEDLOCK_KEY, FENCEDLOCK_FENCE and FENCEDLOCK_TTL_MS in its environment;
send FENCEDLOCK_FENCE with every write and have the resource refuse lower fences.
The lease is renewed every ttl/3 while the command runs. If a renewal fails, the command
(its whole process group) gets SIGTERM, then SIGKILL after --kill-grace or when the lease's
validity (as last renewed, by fencedlock's clock) ends, whichever comes first, and fencedlock
exits 76: the command never outlives its lease. A command that needs a long graceful shutdown
needs a longer --ttl: a failed renewal leaves it about 2/3 of the ttl (see `fencedlock plan`).
With --min-hold, fencedlock itself stays running after the command exits, renewing the lease
until the hold ends, then releases it and exits with the command's code.
SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are forwarded to the command; the
lease is released when it exits. When stdin is not a terminal (cron, systemd) the command
runs in its own process group so that a lost lease stops all of it.

Examples:
  # crontab on every host: one of them runs the report, the others exit 75 quietly;
  # --min-hold keeps the lock for 1m so a host whose clock lags cannot run it again
  */5 * * * * fencedlock run -q report --ttl 2m --min-hold 1m -- /opt/report.sh
  # wait up to a minute for the previous run to finish
  fencedlock run migrate --ttl 30s --wait 1m -- ./migrate.sh
  # fenced Redlock over three independent servers
  fencedlock run sync --ttl 30s --redis redis://a:6379,redis://b:6379,redis://c:6379 -- ./sync.sh
  # use the fence in a shell string (run by sh -c)
  fencedlock run k --ttl 10s -c 'psql -c \"UPDATE jobs SET fence=$FENCEDLOCK_FENCE WHERE fence <= $FENCEDLOCK_FENCE\"'
  # a skipped run is no failure for this cron job (flock -E 0)
  fencedlock run report -E 0 -- ./report.sh
  # a cache warm-up whose duplicate is harmless: run it even when the lock server is down
  fencedlock run warm --ttl 1m --on-unavailable run -- ./warm-cache.sh
  # at most 3 exports at once across all hosts; each gets its own FENCEDLOCK_FENCE
  fencedlock run nightly-export --permits 3 --wait 10m -- ./export.sh
";

/// `--on-unavailable`, with the lesson's guidance: decide in advance, by what a duplicate run
/// costs, not during the outage.
const RUN_POLICY: &str = "\
When the lock service cannot answer (a server unreachable, timing out, loading, out of
memory or in its restart grace, no majority answering, a grant not confirmed by
--confirm-replicas), --on-unavailable decides, and --wait first waits that long:
  fail  (default) exit 69; the command does not run. For work that nothing else protects,
        where two copies running at once do damage.
  skip  exit 75 with a one-line notice, as when another host holds the lock. For periodic
        work that the next run catches up on, when missing a run is cheaper than risking two.
  run   run the command WITHOUT the lock: FENCEDLOCK_FENCE, FENCEDLOCK_KEY and
        FENCEDLOCK_TTL_MS are unset and a warning goes to stderr; the exit code is the
        command's. For work whose duplicate is harmless, or whose resource enforces its own
        invariant (e.g. refuses writes without a current fence).
A misconfiguration (module not loaded, commands or key denied by ACL, a key of another type,
bad arguments) always fails with its own exit code: failing open on it would run every job
unlocked, forever, with nothing down to notice.";

const ACQUIRE_POLICY: &str = "\
When the lock service cannot answer, --on-unavailable fail (default) exits 69 and skip exits
75 with a one-line notice, as for a busy lock. There is no `run`: acquire has no work to run
unlocked, and it never prints a lease it does not hold.";

const ACQUIRE_AFTER: &str = "\
Prints \"TOKEN FENCE\" (or only the fence with --token-file). The lease stays held until its
ttl runs out, `fencedlock renew` extends it, or `fencedlock release` ends it. The token is a
secret: prefer --token-file (written with mode 0600) over the command line.

Examples:
  read -r token fence < <(fencedlock acquire --key deploy --ttl 5m)
  fence=$(fencedlock acquire --key deploy --ttl 5m --token-file /run/deploy.token)
  fencedlock acquire --key deploy --ttl 5m --wait 30s --json";

const RENEW_AFTER: &str = "\
Exits 0 if the lease was still held and now runs --ttl from now; 76 if it is gone.

Examples:
  fencedlock renew --key deploy --ttl 5m --token-file /run/deploy.token
  FENCEDLOCK_TOKEN=$token fencedlock renew --key deploy --ttl 5m";

const RELEASE_AFTER: &str = "\
Exits 0 if the lease was still held and is now released; 76 if it had already expired or
been taken over (the work it protected may have overlapped with another owner's).

Examples:
  fencedlock release --key deploy --token-file /run/deploy.token
  fencedlock release --key deploy --token \"$token\"";

const STATUS_AFTER: &str = "\
Shows the key's fence, whether a lease holds it and how long it has left; never the token.
With several servers, one line per server, then the majority's view. A semaphore key
(`run --permits N`) shows its permits and one line per holder: fence, time left, label.

Examples:
  fencedlock status deploy
  fencedlock status deploy --json";

const PLAN_AFTER: &str = "\
The worker freezes just as a renewal falls due, the worst moment (the lesson's trade-off):
  freeze absorbed   ttl - renew interval - the client's clock-drift allowance: a longer
                    freeze loses the lease (the holder's own clock says it expired)
  failed renewals   renewal attempts that fit in one lease (before ttl - drift), minus the
  tolerated         last one; `run` stops the command at the first failed renewal, so for
                    it this is the margin left for a stall or a slow server
  recovery          after a crash, up to the ttl: the lease must run out (a successor
                    waiting with --wait is granted it at expiry)
  stale window      for --pause beyond ttl - renew interval: how long another owner may hold
                    the lock while the paused worker still thinks it does; only the
                    resource's fence check protects it then
Warnings: --renew-every at or beyond the ttl (the lease lapses between renewals), a renewal
interval that leaves no failed renewal tolerated (beyond about ttl/2), a pause beyond the
freeze. Exit 0, or 64 on invalid input.

Examples:
  fencedlock plan --ttl 30s
  fencedlock plan --ttl 30s --renew-every 10s --pause 45s
  fencedlock plan --ttl 2m --renew-every 20s --json";

const DEMO_AFTER: &str = "\
Three workers race for the invoice lock. The first to get it reads the invoice, passes its
lease check, then stalls (a stop-the-world pause) longer than its lease. Another worker
takes over with a higher fence and sends the invoice. When the stalled worker wakes up and
writes, the table refuses its write because its fence is lower:
  UPDATE invoices SET sent = sent + 1, last_fence = :fence
   WHERE id = :id AND last_fence <= :fence
--no-fence runs the same race with the fence check removed from the UPDATE: a double send.

--stale-first is the other ordering: the stale write reaches the table after the new owner
read the invoice but before its first write. No newer fence is in the table yet, so the
stale write is accepted and the new owner then sends from what it read before: fencing is
an ordering boundary, not a cancellation. --claim makes each owner's first step a claim
that raises the fence in the same statement as its read:
  UPDATE invoices SET last_fence = :fence
   WHERE id = :id AND last_fence <= :fence RETURNING sent
and the stale write is refused wherever it lands.

The invoices live in SQLite by default; --database postgres://… runs the same race on
PostgreSQL (in a schema of its own, fencedlock_demo). The claim and the fenced UPDATE are
fencedlock-guard's, the same on both; the header prints the exact statements.

Invariant: the invoice is sent exactly once, the stale write is refused, and no worker
sends from state that changed after it read it. Exit 0: it holds (default, --claim,
--stale-first --claim). Exit 65: violated (--no-fence, --stale-first).

Examples:
  fencedlock demo
  fencedlock demo --no-fence
  fencedlock demo --stale-first
  fencedlock demo --stale-first --claim
  fencedlock demo --database postgres://postgres@127.0.0.1:5432/postgres --claim
  fencedlock demo --redis redis://127.0.0.1:6380 --ttl 1s";

/// Run a command under a distributed lease, so a job scheduled on many hosts runs once.
#[derive(Debug, Parser)]
#[command(name = "fencedlock", version, about, after_help = format!("{ROOT_AFTER}\n\n{EXIT_CODES}"))]
pub struct Cli {
    /// Options shared by every subcommand.
    #[command(flatten)]
    pub global: Global,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Options accepted by every subcommand.
#[derive(Debug, Args)]
pub struct Global {
    /// Lock server URL: redis://, rediss:// (TLS) or redis+sentinel://HOST:PORT[,HOST:PORT…]/SERVICE.
    /// Repeat it (or separate with commas before each scheme) for fenced Redlock over
    /// independent servers.
    #[arg(
        long = "redis",
        value_name = "URL",
        global = true,
        env = "FENCEDLOCK_REDIS",
        default_value = "redis://127.0.0.1:6379"
    )]
    pub redis: Vec<String>,

    /// The --redis URLs are nodes of one Redis Cluster (any of them will do): each key goes to
    /// its slot's primary, following slot moves. Without it, a cluster node answers MOVED for
    /// keys it does not own.
    #[arg(long, global = true, env = "FENCEDLOCK_CLUSTER")]
    pub cluster: bool,

    /// Which engine serves the leases: the module where a server has it and the Functions
    /// library elsewhere (auto, loading the library if missing or older), or only one of them.
    #[arg(long, value_enum, global = true, env = "FENCEDLOCK_ENGINE", default_value_t = EngineArg::Auto)]
    pub engine: EngineArg,

    /// Per-server request timeout (connecting included).
    #[arg(long, value_name = "DURATION", global = true, default_value = "500ms", value_parser = duration::parse)]
    pub timeout: Duration,

    /// TLS for rediss:// servers.
    #[command(flatten)]
    pub tls: TlsArgs,

    /// Machine-readable output: one JSON object per result (on stderr for `run`).
    #[arg(long, global = true)]
    pub json: bool,

    /// Print only errors (not the "skipped" notice).
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,

    /// More log detail on stderr (-v info, -vv debug, -vvv trace).
    #[arg(short, long, global = true, action = ArgAction::Count)]
    pub verbose: u8,
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
}

/// `--tls-cacert`, `--tls-cert`, `--tls-key`: TLS settings for every `rediss://` server.
#[derive(Debug, Args)]
pub struct TlsArgs {
    /// PEM file of the certificate authority that signed the servers' certificates (instead
    /// of the system's). Only with rediss:// URLs.
    #[arg(long, value_name = "FILE", global = true, env = "FENCEDLOCK_TLS_CACERT")]
    pub tls_cacert: Option<PathBuf>,

    /// PEM client certificate for mutual TLS (with --tls-key).
    #[arg(long, value_name = "FILE", global = true, env = "FENCEDLOCK_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", global = true, env = "FENCEDLOCK_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run COMMAND while holding the lease on KEY (skip it if another owner holds it).
    #[command(after_help = format!("{RUN_AFTER}\n{RUN_POLICY}\n\n{EXIT_CODES}"))]
    Run(RunArgs),
    /// Take a lease and print its token and fence, for shell scripts.
    #[command(after_help = format!("{ACQUIRE_AFTER}\n\n{ACQUIRE_POLICY}\n\n{EXIT_CODES}"))]
    Acquire(AcquireArgs),
    /// Extend a lease taken with `acquire`.
    #[command(after_help = format!("{RENEW_AFTER}\n\n{EXIT_CODES}"))]
    Renew(RenewArgs),
    /// End a lease taken with `acquire`.
    #[command(after_help = format!("{RELEASE_AFTER}\n\n{EXIT_CODES}"))]
    Release(ReleaseArgs),
    /// Show a key's fence, whether it is held, and the time left.
    #[command(after_help = format!("{STATUS_AFTER}\n\n{EXIT_CODES}"))]
    Status(StatusArgs),
    /// Size a lease: the freeze it absorbs, the failed renewals it tolerates, the recovery
    /// time after a crash, and the stale window of a longer pause.
    #[command(after_help = PLAN_AFTER)]
    Plan(PlanArgs),
    /// The billing demo: why only a fence checked by the resource stops a paused worker.
    /// Only in builds with the `demo` feature (it brings SQLite).
    #[command(after_help = format!("{DEMO_AFTER}\n\n{EXIT_CODES}"), hide = cfg!(not(feature = "demo")))]
    Demo(DemoArgs),
    /// Print the Functions library, the engine for servers that cannot load the module:
    /// `fencedlock functions | redis-cli -x FUNCTION LOAD REPLACE`.
    Functions(FunctionsArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout.
    #[command(after_help = COMPLETIONS_AFTER)]
    Completions(CompletionsArgs),
    /// Print the manual page (roff) to stdout: fencedlock(1), or a subcommand's.
    #[command(after_help = MAN_AFTER)]
    Man(ManArgs),
}

const COMPLETIONS_AFTER: &str = "\
Examples:
  fencedlock completions bash > ~/.local/share/bash-completion/completions/fencedlock
  fencedlock completions zsh > \"${fpath[1]}/_fencedlock\"
  fencedlock completions fish > ~/.config/fish/completions/fencedlock.fish";

const MAN_AFTER: &str = "\
Examples:
  fencedlock man | man -l -
  fencedlock man > /usr/local/share/man/man1/fencedlock.1
  fencedlock man run > /usr/local/share/man/man1/fencedlock-run.1";

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
    /// Run this string with `sh -c` instead of a command after `--` (flock's -c), for
    /// pipes, redirections and $FENCEDLOCK_FENCE expansions.
    #[arg(short = 'c', long = "command", value_name = "STRING", conflicts_with = "argv")]
    pub shell: Option<OsString>,
    /// The command and its arguments, after `--`.
    #[arg(id = "argv", last = true, required_unless_present = "shell", num_args = 1.., value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

impl RunArgs {
    /// The program and its arguments: those after `--`, or `sh -c STRING` for `-c`.
    pub fn argv(&self) -> Vec<OsString> {
        match &self.shell {
            Some(script) => vec!["sh".into(), "-c".into(), script.clone()],
            None => self.command.clone(),
        }
    }
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
    /// queue, like `run --wait`).
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = duration::parse)]
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
    /// New lease time, counted from now (500ms, 30s, 5m, 1h, 1d).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration::parse_ttl)]
    pub ttl: Duration,
    /// The lease's token.
    #[command(flatten)]
    pub token: TokenSource,
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
}

/// `fencedlock status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The lock key.
    #[command(flatten)]
    pub key: KeyArg,
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
