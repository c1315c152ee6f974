//! Diagnostics on stderr through `tracing`: quiet by default (fencedlock's own one-line
//! notices say what matters), more with -v, or any filter through `FENCEDLOCK_LOG`.

use tracing_subscriber::EnvFilter;

/// Installs the subscriber. `verbose` counts `-v`; `quiet` keeps only errors.
pub fn init(verbose: u8, quiet: bool) {
    let default = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "error",
        (false, 1) => "info",
        (false, 2) => "debug",
        _ => "trace",
    };
    let filter = std::env::var("FENCEDLOCK_LOG")
        .ok()
        .and_then(|spec| EnvFilter::try_new(spec).ok())
        .unwrap_or_else(|| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(verbose >= 2)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = if verbose == 0 { builder.without_time().try_init() } else { builder.try_init() };
}
