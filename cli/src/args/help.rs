//! The text `--help` shows after the options: each subcommand's notes and examples, and the
//! exit-code table, kept as data so that every help page, the man pages and the CLI guide's
//! table (`docs/cli.md`, checked by a test) come from the one list.

/// The exit codes: code, meaning. `--help` of the root and of every subcommand that talks to
/// servers lists them, rendered by [`exit_codes`].
pub const EXIT_CODES: &[(&str, &str)] = &[
    ("0", "success (run, elect: the command exited 0; demo: the invariant held)"),
    ("1-255", "run, elect: the command's own exit code; 128+N if it died from signal N"),
    (
        "64",
        "usage: bad option, duration, URL or token file; ttl out of range; key of another type; \
         --permits out of range, with several servers, or another count than the key's; run \
         --shared with several servers, with --permits or --every",
    ),
    ("65", "demo: invariant violated (the double send --no-fence and --stale-first show)"),
    (
        "69",
        "unavailable: server unreachable, timing out, loading, out of memory or in its restart \
         grace; grant not confirmed by --confirm-replicas; no majority (these are what \
         --on-unavailable decides); --engine module on a server without the module; commands \
         or key denied by ACL; wrong password or user (give them in the URL: \
         redis://USER:PASSWORD@HOST:PORT)",
    ),
    ("70", "internal: unexpected server reply"),
    (
        "74",
        "the token file could not be written (the lease is given back at once), or stdout \
         (completions, man)",
    ),
    (
        "75",
        "busy: another owner holds the lock (skipped, or --wait ran out; run \
         --conflict-exit-code N picks another code); a run --every job not due yet; a server \
         that cannot answer under --on-unavailable skip",
    ),
    (
        "76",
        "lease lost: run and elect terminated the command, hold signalled its shell; \
         renew/release found the lease gone",
    ),
    (
        "78",
        "configuration: no engine can serve leases (the module is not loaded, and this user may \
         neither load nor run the Functions library: FUNCTION, SCRIPT and EVAL* denied); TLS: \
         the server's certificate does not verify against --tls-cacert, or the server refused \
         the client certificate. Not 69: no retry or --on-unavailable policy can fix either",
    ),
    ("126/127", "run, elect: the command is not executable / not found"),
];

/// Width of the help text the table is wrapped to (clap wraps the rest to the terminal).
const WIDTH: usize = 92;
/// Where a meaning starts: after two spaces and the code column.
const MEANING_COLUMN: usize = 11;

/// The exit-code table as help text: `Exit codes:`, then one row per code, its meaning
/// wrapped under itself.
pub fn exit_codes() -> String {
    let mut text = String::from("Exit codes:");
    for (code, meaning) in EXIT_CODES {
        let mut line = format!("\n  {code:<width$}", width = MEANING_COLUMN - 3);
        let mut column = line.len() - 1;
        for (i, word) in meaning.split_whitespace().enumerate() {
            if i > 0 && column + 1 + word.len() > WIDTH {
                line.push('\n');
                line.push_str(&" ".repeat(MEANING_COLUMN));
                column = MEANING_COLUMN;
            } else {
                line.push(' ');
                column += 1;
            }
            line.push_str(word);
            column += word.len();
        }
        text.push_str(&line);
    }
    text
}

pub const ROOT_AFTER: &str = "\
Examples:
  fencedlock run nightly-report --ttl 30s -- ./report.sh
  fencedlock run nightly-report -c './report.sh > /var/log/report.log'
  fencedlock run backup --ttl 5m --wait 1m --redis redis://lock1:6379 -- backup.sh
  fencedlock run sync --redis redis://a:6379,redis://b:6379,redis://c:6379 -- sync.sh
  fencedlock list jobs: --json
  fencedlock elect scheduler -- ./scheduler.sh
  fencedlock plan --ttl 30s --renew-every 10s --pause 45s

The subcommands that talk to servers take --redis (or FENCEDLOCK_REDIS), --cluster, --engine,
--timeout and --tls-*; given before the subcommand, they are the subcommand's. One --redis is a
single-server lease; several are fenced Redlock (a majority must grant, and the fence still
increases across grants). Log detail: -v / -vv / -vvv, or FENCEDLOCK_LOG=debug.";

pub const RUN_AFTER: &str = "\
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
With --every, the holder first reads the key's record of its last counted run (kept on the
server, beside the key) and runs the command only if that run started at least a period ago
by the server's clock; otherwise it skips as for a busy lock. A run that exits 0 (any run,
with --count-failures) is recorded before the lease is released; `status` shows the record.
SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are forwarded to the command; the
lease is released when it exits. When stdin is not a terminal (cron, systemd) the command
runs in its own process group so that a lost lease stops all of it.

Examples:
  # crontab on every host: one of them runs the report, the others exit 75 quietly;
  # --min-hold keeps the lock for 1m so a host whose clock lags cannot run it again
  */5 * * * * fencedlock run -q report --ttl 2m --min-hold 1m -- /opt/report.sh
  # at most one run an hour across hosts whose cron schedules and clocks disagree
  */10 * * * * fencedlock run -q -E 0 nightly-sync --every 1h -- /opt/sync.sh
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
pub const RUN_POLICY: &str = "\
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

pub const ACQUIRE_POLICY: &str = "\
When the lock service cannot answer, --on-unavailable fail (default) exits 69 and skip exits
75 with a one-line notice, as for a busy lock. There is no `run`: acquire has no work to run
unlocked, and it never prints a lease it does not hold.";

pub const ACQUIRE_AFTER: &str = "\
Prints \"TOKEN FENCE\" (or only the fence with --token-file). The lease stays held until its
ttl runs out, `fencedlock renew` extends it, or `fencedlock release` ends it. The token is a
secret: prefer --token-file (written with mode 0600) over the command line. To keep a lease
for the rest of a script without renewing it yourself, use `fencedlock hold`.

Examples:
  read -r token fence < <(fencedlock acquire deploy --ttl 5m)
  fence=$(fencedlock acquire deploy --ttl 5m --token-file /run/deploy.token)
  fencedlock acquire deploy --ttl 5m -w 30s --json";

pub const RENEW_AFTER: &str = "\
Exits 0 if the lease was still held and now runs --ttl from now; 76 if it is gone. --ttl is
required: the server keeps a lease's deadline, not the ttl it was granted with, so renew
cannot know it, and any default would shorten (or stretch) some lease without a word.

Examples:
  fencedlock renew deploy --ttl 5m --token-file /run/deploy.token
  FENCEDLOCK_TOKEN=$token fencedlock renew deploy --ttl 5m";

pub const RELEASE_AFTER: &str = "\
Exits 0 if the lease was still held and is now released; 76 if it had already expired or
been taken over (the work it protected may have overlapped with another owner's).

Examples:
  fencedlock release deploy --token-file /run/deploy.token
  fencedlock release deploy --token \"$token\"";

pub const STATUS_AFTER: &str = "\
Shows the key's fence, whether a lease holds it, how long it has left and the holder's label
(run, acquire and hold label their leases with host name and pid unless told otherwise); never
the token. A key the server has no record of (never locked, or reclaimed after its lease
ended) shows no fence: only that the next one exceeds every earlier one. With several
servers, one line per server, then the majority's view. A semaphore key (`run --permits N`)
shows its permits and one line per holder: fence, time left, label.

Examples:
  fencedlock status deploy
  fencedlock status deploy --json";

pub const LIST_AFTER: &str = "\
Lists the held locks and semaphores whose keys start with PREFIX (all of them without one):
key, fence, holders with their labels and time left, the server that has them. It walks the
keyspace with SCAN, never KEYS: each call looks at about --count keys (the server answers
other clients between calls), filtered by the server to the lock key type of its engine (the
module's, or the Functions library's hashes), on every --redis server or every primary of a
--cluster. It stops after about --max-scan keys and says so (exit 0, \"incomplete\" in
--json): narrow it with a PREFIX, or raise the bound. Keys created or deleted while it runs
may be missed; one may show twice (SCAN's guarantees).

Examples:
  fencedlock list
  fencedlock ls jobs:
  fencedlock list invoice: --all --json
  fencedlock list --cluster --redis redis://node1:7000";

pub const HOLD_AFTER: &str = "\
Takes the lease, prints its fence on a line of its own, and keeps the lease alive (renewed
every ttl/3) until its shell is done with it: it releases the lease and exits when the
process that started it exits (the script's shell), when the line's reader closes it, or on
SIGTERM, SIGINT or SIGHUP. If a renewal fails, it sends --signal (TERM by default) to that
shell and exits 76: a script that traps the signal learns the lease is gone. A busy lock
exits 75 at once (or after --wait), printing nothing.

The shell idiom, beside flock's:
  # flock: the lock lives as long as fd 9 is open
  exec 9>/var/lock/deploy.lock; flock -n 9 || exit 75
  # fencedlock: the lease lives as long as fd 9 is open (and the shell runs)
  trap 'echo \"lease lost\" >&2; exit 76' TERM
  exec 9< <(fencedlock hold deploy --ttl 30s); read -r fence <&9 || exit 75
  ./step1.sh \"$fence\"; ./step2.sh \"$fence\"
  exec 9<&-    # release now (flock: flock -u 9, or exec 9>&-); or let the script end
A step that must stop the moment the lease is lost belongs under `fencedlock run`: a shell
runs its trap only after the running step ends.";

pub const ELECT_AFTER: &str = "\
Campaigns for leadership of NAME (waiting in the server's queue, as long as it takes), then
runs the command while leader: it gets FENCEDLOCK_KEY, FENCEDLOCK_EPOCH (the leadership's
epoch: its lease's fence, higher than every earlier leader's), FENCEDLOCK_FENCE (the same)
and FENCEDLOCK_TTL_MS. The command runs under the same guardian as `run`'s: if leadership is
lost (a renewal fails), it gets SIGTERM, then SIGKILL after --kill-grace or when the lease's
validity ends, whichever comes first, and fencedlock exits 76; if fencedlock dies, the
guardian kills the command's process tree. When the command exits, the leadership is handed
to the next candidate at once and fencedlock exits with the command's code. The label
(--label; host name and pid by default) is what `fencedlock leader` shows. Needs one --redis
server (or a --cluster): a Redlock majority has no single leader to show.

Examples:
  fencedlock elect scheduler --ttl 10s -- ./scheduler.sh
  fencedlock elect scheduler --label \"$(hostname)\" -c 'exec ./scheduler --epoch \"$FENCEDLOCK_EPOCH\"'";

pub const LEADER_AFTER: &str = "\
Prints the leader's label, epoch and time left, or that nobody leads (exit 0 either way).
--watch prints a line at each change of leader until interrupted: it polls every --interval
and, before each poll, reads the election's journal (a capped stream beside the key to which
every leader `fencedlock elect` elects appends its epoch and label), so a leader that came and
went between two polls is still printed, marked \"resigned before this poll\". Leaders of
clients that keep no journal are seen when a poll finds them leading.

Examples:
  fencedlock leader scheduler
  fencedlock leader scheduler --watch --json";

pub const PLAN_AFTER: &str = "\
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

pub const DEMO_AFTER: &str = "\
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

pub const FUNCTIONS_AFTER: &str = "\
Examples:
  fencedlock functions | redis-cli -x FUNCTION LOAD REPLACE
  fencedlock functions --script | redis-cli -x SCRIPT LOAD
  fencedlock functions --floor-key invoice:42";

pub const COMPLETIONS_AFTER: &str = "\
Examples:
  fencedlock completions bash > ~/.local/share/bash-completion/completions/fencedlock
  fencedlock completions zsh > \"${fpath[1]}/_fencedlock\"
  fencedlock completions fish > ~/.config/fish/completions/fencedlock.fish";

pub const MAN_AFTER: &str = "\
Examples:
  fencedlock man | man -l -
  fencedlock man > /usr/local/share/man/man1/fencedlock.1
  fencedlock man run > /usr/local/share/man/man1/fencedlock-run.1";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_wrapped_under_its_meanings() {
        let text = exit_codes();
        assert!(text.starts_with("Exit codes:\n  0        success"), "{text}");
        assert!(text.contains("\n  126/127  run, elect"), "{text}");
        for line in text.lines() {
            assert!(line.len() <= WIDTH, "{line:?}");
        }
        // Each row starts with two spaces and its code; a continuation is indented further.
        let rows = text.lines().filter(|l| l.starts_with("  ") && !l.starts_with("   ")).count();
        assert_eq!(rows, EXIT_CODES.len());
        let words = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        let all: Vec<String> = EXIT_CODES.iter().flat_map(|(c, m)| words(&format!("{c} {m}"))).collect();
        assert_eq!(words(text.trim_start_matches("Exit codes:")), all);
    }
}
