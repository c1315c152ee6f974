//! One real PostgreSQL server, for the tests of fenced writes at the resource.
//!
//! PostgreSQL refuses to run as root, and tests and CI run as root: the server then runs as an
//! unprivileged user (`postgres`, which Debian's package creates; else `fencedlock-pg`,
//! created here), in a temp dir that user owns. `initdb -A trust` (loopback only, a throwaway
//! cluster), `pg_ctl start -w` on a port in [`PG_PORT_MIN`]..=[`PG_PORT_MAX`] with its socket
//! in the temp dir, and `pg_ctl stop -m immediate` on drop, so no server outlives its test.
//!
//! ```no_run
//! let pg = harness::Postgres::start();
//! assert_eq!(pg.psql("SELECT 1 + 1"), "2");
//! let url = pg.url(); // postgres://postgres@127.0.0.1:PORT/postgres
//! ```
//!
//! Environment: `FENCEDLOCK_PG_BIN`, the directory with `initdb`, `pg_ctl` and `psql`
//! (default: the newest `/usr/lib/postgresql/*/bin`).

use std::collections::HashSet;
use std::ffi::CString;
use std::fs;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

use tempfile::TempDir;

use crate::error::{HarnessError, Result};

/// Lowest port a PostgreSQL test server listens on (below the ephemeral range, apart from
/// the Redis servers' 10000..=22000 and their cluster bus ports).
pub const PG_PORT_MIN: u16 = 27000;
/// Highest port a PostgreSQL test server listens on.
pub const PG_PORT_MAX: u16 = 27999;
/// The superuser `initdb` creates, and the user of [`Postgres::url`].
pub const PG_USER: &str = "postgres";
/// The unprivileged user the harness creates when running as root on a machine without the
/// `postgres` user.
const FALLBACK_USER: &str = "fencedlock-pg";
/// Seconds `pg_ctl` waits for the server to accept connections, or to stop.
const PG_CTL_WAIT_SECS: &str = "60";
const PORT_TRIES: usize = 8;
const LOG_FILE: &str = "postgres.log";
const HINT: &str = "install Debian's postgresql package (scripts/setup does), or set FENCEDLOCK_PG_BIN";

/// Ports handed out by this process, never reused (as for the Redis servers).
static CLAIMED: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// A running PostgreSQL server on 127.0.0.1, stopped when dropped.
#[derive(Debug)]
pub struct Postgres {
    dir: TempDir,
    bin: PathBuf,
    port: u16,
    owner: Option<Owner>,
}

/// The unprivileged user the server runs as, when the harness runs as root.
#[derive(Debug, Clone, Copy)]
struct Owner {
    uid: libc::uid_t,
    gid: libc::gid_t,
}

impl Postgres {
    /// Starts a fresh cluster; panics with the reason (and the server's log) if it cannot.
    pub fn start() -> Postgres {
        Postgres::try_start().unwrap_or_else(|e| panic!("cannot start PostgreSQL: {e}"))
    }

    /// Starts a fresh cluster.
    pub fn try_start() -> Result<Postgres> {
        let bin = bin_dir()?;
        let owner = if is_root() { Some(unprivileged_owner()?) } else { None };
        let dir = tempfile::Builder::new().prefix("fencedlock-pg-").tempdir()?;
        if let Some(owner) = owner {
            chown(dir.path(), owner)?;
        }
        let mut pg = Postgres { dir, bin, port: 0, owner };
        pg.initdb()?;
        let mut last = None;
        for _ in 0..PORT_TRIES {
            pg.port = pick_pg_port();
            match pg.pg_ctl_start() {
                Ok(()) => return Ok(pg),
                Err(e) => last = Some(e),
            }
        }
        pg.port = 0; // nothing to stop
        Err(last.unwrap_or_else(|| pg.failure("no port tried")))
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres` (trust authentication: no password).
    pub fn url(&self) -> String {
        self.url_for("postgres")
    }

    /// The URL of another database on this server (create it with [`Postgres::create_database`]).
    pub fn url_for(&self, database: &str) -> String {
        format!("postgres://{PG_USER}@127.0.0.1:{}/{database}", self.port)
    }

    /// Creates the database `name` (an identifier the test chooses: letters, digits, `_`).
    pub fn create_database(&self, name: &str) {
        assert!(name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'), "database name {name:?}");
        self.psql(&format!("CREATE DATABASE {name}"));
    }

    /// Runs `sql` with `psql` in the `postgres` database and returns its output, unaligned
    /// and without headers (rows on lines, columns separated by `|`), trimmed. Panics with
    /// psql's error if a statement fails.
    pub fn psql(&self, sql: &str) -> String {
        self.psql_in("postgres", sql)
    }

    /// [`Postgres::psql`] in the database `database`.
    pub fn psql_in(&self, database: &str, sql: &str) -> String {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-U", PG_USER])
            .args(["-p", &self.port.to_string(), "-d", database, "-c", sql])
            .env("PGCONNECT_TIMEOUT", "10")
            .output()
            .unwrap_or_else(|e| panic!("cannot run psql in {:?}: {e}", self.bin));
        assert!(out.status.success(), "psql failed on {sql:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// The last `n` lines of the server's log.
    pub fn log_tail(&self, n: usize) -> String {
        let log = fs::read_to_string(self.dir.path().join(LOG_FILE)).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn initdb(&self) -> Result<()> {
        let out = self.run_as_owner(
            "initdb",
            &[
                "-D".as_ref(),
                self.data_dir().as_os_str(),
                "-A".as_ref(),
                "trust".as_ref(),
                "-U".as_ref(),
                PG_USER.as_ref(),
                "-E".as_ref(),
                "UTF8".as_ref(),
                "--locale=C".as_ref(),
                // A throwaway cluster: skipping the fsyncs saves seconds per test.
                "--no-sync".as_ref(),
                "--no-instructions".as_ref(),
            ],
        )?;
        self.exited_0("initdb", &out)
    }

    /// `Ok` if `out`, of the `what` command, exited 0; else the failure, with its output.
    fn exited_0(&self, what: &str, out: &Output) -> Result<()> {
        if out.status.success() {
            Ok(())
        } else {
            Err(self.failure(&format!("{what} exited with {}: {}", out.status, output_text(out))))
        }
    }

    fn pg_ctl_start(&self) -> Result<()> {
        // Loopback only; the socket in the temp dir (the default /var/run/postgresql may not
        // exist or be writable); no fsync for a test cluster.
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join(LOG_FILE);
        let out = self.run_as_owner(
            "pg_ctl",
            &[
                "-D".as_ref(),
                self.data_dir().as_os_str(),
                "-l".as_ref(),
                log.as_os_str(),
                "-w".as_ref(),
                "-t".as_ref(),
                PG_CTL_WAIT_SECS.as_ref(),
                "-o".as_ref(),
                options.as_ref(),
                "start".as_ref(),
            ],
        )?;
        self.exited_0("pg_ctl start", &out)
    }

    fn stop(&self) {
        let stopped = self
            .run_as_owner(
                "pg_ctl",
                &[
                    "-D".as_ref(),
                    self.data_dir().as_os_str(),
                    "-m".as_ref(),
                    "immediate".as_ref(),
                    "-w".as_ref(),
                    "-t".as_ref(),
                    PG_CTL_WAIT_SECS.as_ref(),
                    "stop".as_ref(),
                ],
            )
            .is_ok_and(|out| out.status.success());
        if !stopped {
            // The postmaster's pid is the first line of postmaster.pid; SIGKILL ends it, and
            // its children exit when they see it gone.
            let pid = fs::read_to_string(self.data_dir().join("postmaster.pid")).ok().and_then(|text| {
                text.lines().next().and_then(|line| line.trim().parse::<libc::pid_t>().ok())
            });
            if let Some(pid) = pid.filter(|pid| *pid > 0) {
                // SAFETY: kill(2) has no memory-safety preconditions; the pid is our
                // server's postmaster, read from its own data directory.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
    }

    /// Runs one of the server binaries as the unprivileged owner (when root), with a HOME
    /// it owns.
    fn run_as_owner(&self, program: &str, args: &[&std::ffi::OsStr]) -> Result<Output> {
        let mut command = Command::new(self.bin.join(program));
        command.args(args).current_dir(self.dir.path()).env("HOME", self.dir.path()).env("LC_ALL", "C");
        if let Some(owner) = self.owner {
            command.uid(owner.uid).gid(owner.gid);
        }
        Ok(command.output()?)
    }

    fn failure(&self, reason: &str) -> HarnessError {
        HarnessError::StartFailed {
            port: self.port,
            reason: reason.to_owned(),
            log: self.dir.path().join(LOG_FILE),
            log_tail: self.log_tail(30),
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if self.port != 0 {
            self.stop();
        }
    }
}

/// stdout and stderr of a finished command, trimmed.
fn output_text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
        .trim()
        .to_owned()
}

/// `FENCEDLOCK_PG_BIN`, or the newest `/usr/lib/postgresql/N/bin` with `initdb`, `pg_ctl`
/// and `psql`.
fn bin_dir() -> Result<PathBuf> {
    let complete = |dir: &Path| ["initdb", "pg_ctl", "psql"].iter().all(|p| dir.join(p).is_file());
    if let Some(dir) = std::env::var_os("FENCEDLOCK_PG_BIN").map(PathBuf::from) {
        return if complete(&dir) {
            Ok(dir)
        } else {
            Err(HarnessError::MissingBinary { flavor: "postgresql", path: dir, hint: HINT })
        };
    }
    let root = Path::new("/usr/lib/postgresql");
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            complete(&bin).then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).ok_or(HarnessError::MissingBinary {
        flavor: "postgresql",
        path: root.join("*/bin/initdb"),
        hint: HINT,
    })
}

fn is_root() -> bool {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The `postgres` user, else `fencedlock-pg`, created if absent.
fn unprivileged_owner() -> Result<Owner> {
    if let Some(owner) = lookup_user("postgres").or_else(|| lookup_user(FALLBACK_USER)) {
        return Ok(owner);
    }
    let out = Command::new("useradd")
        .args(["--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", FALLBACK_USER])
        .output()?;
    lookup_user(FALLBACK_USER).ok_or_else(|| HarnessError::MissingBinary {
        flavor: "postgresql",
        path: PathBuf::from("/etc/passwd"),
        hint: if out.status.success() {
            "PostgreSQL refuses to run as root, and the user created for it cannot be found"
        } else {
            "PostgreSQL refuses to run as root: create an unprivileged user `postgres` (Debian's postgresql package does)"
        },
    })
}

fn lookup_user(name: &str) -> Option<Owner> {
    let name = CString::new(name).ok()?;
    // SAFETY: `name` is a valid NUL-terminated string; getpwnam returns NULL or a pointer
    // to a static record, read at once before any other getpw* call on this thread.
    let entry = unsafe { libc::getpwnam(name.as_ptr()) };
    if entry.is_null() {
        return None;
    }
    // SAFETY: `entry` is non-null and points to the record getpwnam just filled.
    let (uid, gid) = unsafe { ((*entry).pw_uid, (*entry).pw_gid) };
    (uid != 0).then_some(Owner { uid, gid })
}

fn chown(path: &Path, owner: Owner) -> Result<()> {
    std::os::unix::fs::chown(path, Some(owner.uid), Some(owner.gid))?;
    Ok(())
}

/// A free port in the PostgreSQL range, claimed for this process.
fn pick_pg_port() -> u16 {
    let span = usize::from(PG_PORT_MAX - PG_PORT_MIN) + 1;
    let start = (std::process::id() as usize).wrapping_mul(7919) % span;
    let mut claimed = CLAIMED.lock().unwrap_or_else(|p| p.into_inner());
    let claimed = claimed.get_or_insert_with(HashSet::new);
    for offset in 0..span {
        let port = PG_PORT_MIN + ((start + offset * 37) % span) as u16;
        if !claimed.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            claimed.insert(port);
            return port;
        }
    }
    panic!("no free port in {PG_PORT_MIN}..={PG_PORT_MAX}");
}
