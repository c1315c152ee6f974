//! Rendering a server's `redis.conf`.
//!
//! The harness writes a config file instead of passing `--flags` so a restart reuses exactly
//! the same settings, and a failed start leaves a readable file next to the log.

use std::path::Path;

/// One config line: a directive and its arguments (each quoted on output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directive {
    /// e.g. `appendonly` or `fencedlock.restart-grace-ms`.
    pub name: String,
    /// Its arguments; `save ""` is one empty argument.
    pub args: Vec<String>,
}

impl Directive {
    /// A directive with the given arguments.
    pub fn new<I, S>(name: impl Into<String>, args: I) -> Directive
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Directive { name: name.into(), args: args.into_iter().map(Into::into).collect() }
    }
}

/// Quote an argument for the server's config parser (`sdssplitargs` rules).
pub fn quote(arg: &str) -> String {
    let mut out = String::with_capacity(arg.len() + 2);
    out.push('"');
    for c in arg.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Render the whole file: the harness's defaults, then `loadmodule`, then the test's own
/// directives. A test directive with the same name as a default replaces that default
/// (so `.arg("save", "60 1")` really enables snapshots). Module configs must come after
/// `loadmodule`, which is why the test's directives are last.
pub fn render(
    port: u16,
    dir: &Path,
    log_file: &Path,
    module: Option<&Path>,
    overrides: &[Directive],
) -> String {
    let dir = dir.to_string_lossy();
    let log = log_file.to_string_lossy();
    let defaults: Vec<Directive> = vec![
        Directive::new("port", [port.to_string()]),
        Directive::new("bind", ["127.0.0.1"]),
        Directive::new("daemonize", ["no"]),
        Directive::new("dir", [dir.as_ref()]),
        Directive::new("logfile", [log.as_ref()]),
        Directive::new("loglevel", ["verbose"]),
        // DEBUG RELOAD / DIGEST-VALUE are part of the tests.
        Directive::new("enable-debug-command", ["yes"]),
        // With diskless sync a replica is "up" before the primary streams commands to it (the
        // primary waits for the replica's first ACK); disk-based sync makes `state=online` mean
        // in sync.
        Directive::new("repl-diskless-sync", ["no"]),
        // No snapshots unless a test asks: SAVE / BGREWRITEAOF are explicit in tests.
        Directive::new("save", [""]),
        Directive::new("appendonly", ["no"]),
    ];
    let mut out = String::from("# written by fencedlock-harness\n");
    let overridden = |name: &str| overrides.iter().any(|d| d.name.eq_ignore_ascii_case(name));
    for d in defaults.iter().filter(|d| !overridden(&d.name)) {
        push_line(&mut out, d);
    }
    if let Some(path) = module {
        push_line(&mut out, &Directive::new("loadmodule", [path.to_string_lossy()]));
    }
    for d in overrides {
        push_line(&mut out, d);
    }
    out
}

fn push_line(out: &mut String, d: &Directive) {
    out.push_str(&d.name);
    for a in &d.args {
        out.push(' ');
        out.push_str(&quote(a));
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use fencedlock_protocol::config::MAX_TTL_MS;

    #[test]
    fn quotes_special_characters() {
        assert_eq!(quote(""), "\"\"");
        assert_eq!(quote("a \"b\"\\"), "\"a \\\"b\\\"\\\\\"");
    }

    #[test]
    fn override_replaces_default_and_module_comes_first() {
        let conf = render(
            12345,
            Path::new("/d"),
            Path::new("/d/server.log"),
            Some(Path::new("/m.so")),
            &[Directive::new("save", ["60 1"]), Directive::new(MAX_TTL_MS.full_name, ["5"])],
        );
        assert!(!conf.contains("save \"\"\n"), "{conf}");
        assert!(conf.contains("save \"60 1\"\n"), "{conf}");
        let lm = conf.find("loadmodule \"/m.so\"\n").expect("loadmodule line");
        let mc = conf.find(MAX_TTL_MS.full_name).expect("module config line");
        assert!(lm < mc, "{conf}");
        assert!(conf.contains("port \"12345\"\n"));
    }
}
