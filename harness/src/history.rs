//! Older releases of the module, built from the repository's history, for tests of
//! compatibility: clients against old servers, new servers loading old data.

/// The last commit whose module predates `FENCEDLOCK.ACQUIRE … BLOCK` (v1: ACQUIRE takes
/// exactly three arguments).
const V1_COMMIT: &str = "9894500";

/// The v1 module, to test against a server whose module cannot wait (the client) or that
/// wrote its values in the first RDB encoding (the module's loader): the file
/// named by `FENCEDLOCK_V1_MODULE`, or built once from the repository's history
/// (`git archive` of commit `9894500`, `cargo build --release --offline`) under
/// `target/v1-module/`. Panics, saying what to do, if neither works.
pub fn v1_module() -> std::path::PathBuf {
    use std::path::PathBuf;
    use std::process::{Command, Stdio};
    use std::sync::OnceLock;

    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if let Some(path) = std::env::var_os("FENCEDLOCK_V1_MODULE") {
                let path = PathBuf::from(path);
                assert!(path.is_file(), "FENCEDLOCK_V1_MODULE={path:?} is not a file");
                return path;
            }
            let out = crate::paths::target_dir().join("v1-module");
            let so = out.join("target").join("release").join("libfencedlock_module.so");
            if so.is_file() {
                return so;
            }
            let src = out.join("src");
            std::fs::create_dir_all(&src).unwrap_or_else(|e| panic!("create {src:?}: {e}"));
            let how = "set FENCEDLOCK_V1_MODULE to a module built from that commit";
            let tar = out.join("v1.tar");
            let archive = Command::new("git")
                .args(["-C", &crate::paths::workspace_root().to_string_lossy(), "archive", "-o"])
                .arg(&tar)
                .arg(V1_COMMIT)
                .status()
                .unwrap_or_else(|e| {
                    panic!("cannot run git to extract the v1 module ({V1_COMMIT}): {e}; {how}")
                });
            assert!(archive.success(), "git archive {V1_COMMIT} failed (not a git checkout?); {how}");
            let untar = Command::new("tar")
                .arg("-xf")
                .arg(&tar)
                .arg("-C")
                .arg(&src)
                .stdin(Stdio::null())
                .status()
                .unwrap_or_else(|e| panic!("cannot run tar: {e}"));
            assert!(untar.success(), "extracting {tar:?} failed; {how}");
            let _ = std::fs::remove_file(&tar);
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let build = Command::new(cargo)
                .args(["build", "--release", "--offline", "-p", "fencedlock-module", "--target-dir"])
                .arg(out.join("target"))
                .current_dir(&src)
                .output()
                .unwrap_or_else(|e| panic!("cannot run cargo: {e}"));
            assert!(
                build.status.success() && so.is_file(),
                "building the v1 module from {V1_COMMIT} failed ({how}):\n{}",
                String::from_utf8_lossy(&build.stderr)
            );
            so
        })
        .clone()
}
