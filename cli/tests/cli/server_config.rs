//! The repository's way to run a lock server: `redis-server ./redis.conf` from a checkout
//! (nothing to create first), and `scripts/run-server`, which builds the module only when its
//! sources changed since it was built.

use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn the_repository_config_starts_a_server_with_the_module_from_the_checkout() {
    let root = workspace_root();
    let port = harness::pick_port(false);
    // As a user types it, from the checkout; nothing written (no AOF, no snapshots), and no
    // directory made first.
    let mut server = Command::new("redis-server")
        .current_dir(&root)
        .args(["./redis.conf", "--port", &port.to_string(), "--appendonly", "no", "--save", ""])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("redis-server (scripts/setup installs it)");
    let url = format!("redis://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        // `--engine module`: answered only where the module was loaded.
        let out = run(&["status", "cfg:k", "--engine", "module", "--redis", &url]);
        if out.code() == 0 || Instant::now() >= deadline {
            break out;
        }
        if let Ok(Some(exit)) = server.try_wait() {
            let mut log = String::new();
            for pipe in [
                server.stdout.take().map(|p| Box::new(p) as Box<dyn std::io::Read>),
                server.stderr.take().map(|p| Box::new(p) as Box<dyn std::io::Read>),
            ]
            .into_iter()
            .flatten()
            {
                let mut pipe = pipe;
                let _ = pipe.read_to_string(&mut log);
            }
            panic!("redis-server ./redis.conf exited with {exit}:\n{log}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(status.code(), 0, "the module is loaded by ./redis.conf: {status:?}");
}

/// A copy of `scripts/run-server` in a checkout of its own, with `cargo` and `redis-server`
/// that record how they were called.
struct FakeCheckout {
    dir: tempfile::TempDir,
}

impl FakeCheckout {
    fn new() -> FakeCheckout {
        let dir = scratch();
        let root = dir.path();
        for sub in ["scripts", "bin", "module/src", "protocol/src", "target/release"] {
            fs::create_dir_all(root.join(sub)).unwrap();
        }
        fs::copy(workspace_root().join("scripts/run-server"), root.join("scripts/run-server")).unwrap();
        let log = root.join("calls");
        for (path, body) in [
            ("scripts/setup", "exit 0".to_string()),
            ("bin/cargo", format!("echo \"cargo $*\" >> '{}'", log.display())),
            ("bin/redis-server", format!("echo \"redis-server $*\" >> '{}'", log.display())),
        ] {
            let path = root.join(path);
            fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        }
        for source in ["Cargo.toml", "Cargo.lock", "module/src/lib.rs", "protocol/src/lib.rs", "redis.conf"] {
            fs::write(root.join(source), "").unwrap();
        }
        FakeCheckout { dir }
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    /// Sets `relative`'s modification time to `touch -d`'s `when`.
    fn touch(&self, relative: &str, when: &str) {
        let status = Command::new("touch").args(["-d", when]).arg(self.path(relative)).status().unwrap();
        assert!(status.success());
    }

    /// `scripts/run-server --port 7000`; the commands it ran.
    fn run_server(&self) -> Vec<String> {
        let _ = fs::remove_file(self.path("calls"));
        let path = format!("{}:{}", self.path("bin").display(), std::env::var("PATH").unwrap_or_default());
        let status = Command::new(self.path("scripts/run-server"))
            .args(["--port", "7000"])
            .env("PATH", path)
            .status()
            .expect("run-server");
        assert!(status.success());
        fs::read_to_string(self.path("calls")).unwrap_or_default().lines().map(str::to_owned).collect()
    }
}

#[test]
fn run_server_builds_the_module_only_when_its_sources_changed() {
    let checkout = FakeCheckout::new();
    let serve = "redis-server ./redis.conf --port 7000".to_string();
    let build = "cargo build --release -p fencedlock-module".to_string();
    // No module yet: built.
    assert_eq!(checkout.run_server(), [build.clone(), serve.clone()]);
    // Built after every source: nothing to build, not even a `cargo` call.
    for source in ["Cargo.toml", "Cargo.lock", "module/src/lib.rs", "protocol/src/lib.rs"] {
        checkout.touch(source, "2024-01-01");
    }
    fs::write(checkout.path("target/release/libfencedlock_module.so"), "").unwrap();
    checkout.touch("target/release/libfencedlock_module.so", "2024-06-01");
    assert_eq!(checkout.run_server(), std::slice::from_ref(&serve));
    // A source changed since: built again.
    checkout.touch("protocol/src/lib.rs", "2024-07-01");
    assert_eq!(checkout.run_server(), [build, serve]);
}
