//! Where things are: the workspace root, the freshly built module, binaries on `PATH`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::error::HarnessError;

/// The workspace root: the parent of this crate's directory (`harness/`).
pub fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap_or(Path::new(".."))
}

/// Path of the module `.so` to load, built once per test process.
///
/// `FENCEDLOCK_MODULE` overrides it (no build). Otherwise this runs
/// `cargo build --release -p fencedlock-module` so a test never loads a stale module, and
/// panics with cargo's output if that build fails.
pub fn module_path() -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        if let Some(path) = std::env::var_os("FENCEDLOCK_MODULE") {
            let path = PathBuf::from(path);
            return if path.is_file() {
                Ok(path)
            } else {
                Err(format!("FENCEDLOCK_MODULE={path:?} is not a file"))
            };
        }
        build_module().map_err(|e| e.to_string())
    });
    match built {
        Ok(path) => path.clone(),
        Err(msg) => panic!("fencedlock module unavailable: {msg}"),
    }
}

fn build_module() -> Result<PathBuf, HarnessError> {
    cargo_build(&["--release", "-p", "fencedlock-module"], Path::new("release/libfencedlock_module.so"))
}

/// The `fencedlock` CLI binary, built once per test process (like the module), so a test
/// never runs a stale one; panics with cargo's output if the build fails.
pub fn cli_binary() -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        cargo_build(&["-p", "fencedlock-cli", "--bin", "fencedlock"], Path::new("debug/fencedlock"))
            .map_err(|e| e.to_string())
    });
    match built {
        Ok(path) => path.clone(),
        Err(msg) => panic!("fencedlock CLI unavailable: {msg}"),
    }
}

/// Runs `cargo build ARGS` in the workspace and returns `artifact` (relative to the target
/// directory), which the build must have produced.
fn cargo_build(args: &[&str], artifact: &Path) -> Result<PathBuf, HarnessError> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(&cargo)
        .arg("build")
        .args(args)
        .current_dir(workspace_root())
        .output()
        .map_err(|e| HarnessError::Build(format!("cannot run {cargo:?}: {e}")))?;
    if !output.status.success() {
        return Err(HarnessError::Build(format!(
            "`cargo build {}` exited with {}:\n{}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    let built = target_dir().join(artifact);
    if built.is_file() {
        Ok(built)
    } else {
        Err(HarnessError::Build(format!("build succeeded but {built:?} is missing")))
    }
}

/// Cargo's target directory: `CARGO_TARGET_DIR` (a relative one taken from the workspace
/// root) or `<root>/target`.
pub fn target_dir() -> PathBuf {
    let root = workspace_root();
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));
    if target.is_absolute() {
        target
    } else {
        root.join(target)
    }
}

/// Resolve a program name the way a shell would: a path is taken as is, a bare name is
/// looked up on `PATH`. `None` when it does not exist.
pub fn find_program(name: &Path) -> Option<PathBuf> {
    if name.components().count() > 1 {
        return name.is_file().then(|| name.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|candidate| candidate.is_file())
}

/// The `redis-cli` binary (env `FENCEDLOCK_REDIS_CLI`, default `redis-cli`); it also
/// drives Valkey, whose protocol and `--cluster` tooling are compatible.
pub fn redis_cli() -> PathBuf {
    let name = std::env::var_os("FENCEDLOCK_REDIS_CLI").unwrap_or_else(|| "redis-cli".into());
    find_program(Path::new(&name)).unwrap_or_else(|| {
        panic!("redis-cli not found ({name:?}); install it with `apt-get install redis-server` (or set FENCEDLOCK_REDIS_CLI)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workspace_root_is_the_virtual_workspace_around_the_harness() {
        let root = workspace_root();
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("the root Cargo.toml");
        assert!(manifest.contains("[workspace]"), "{root:?} is not the workspace root");
        assert!(root.join("harness").join("Cargo.toml").is_file(), "{root:?}");
        assert!(root.join("module").join("Cargo.toml").is_file(), "the module builds from {root:?}");
    }

    #[test]
    fn the_target_dir_defaults_to_the_workspace_target() {
        if std::env::var_os("CARGO_TARGET_DIR").is_none() {
            assert_eq!(target_dir(), workspace_root().join("target"));
        }
        assert!(target_dir().is_absolute());
    }
}
