//! `fencedlock completions` and `fencedlock man`: generated from the same clap definitions as
//! `--help`, so an installed binary carries its own completions and manual and they cannot
//! drift from the options it parses.

use std::io::Write;

use clap::CommandFactory;

use crate::args::{Cli, CompletionsArgs, ManArgs};
use crate::error::{code, CliError};

/// Writes the completion script for `args.shell` to stdout.
pub fn completions(args: &CompletionsArgs) -> Result<u8, CliError> {
    let mut cmd = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "fencedlock", &mut script);
    emit(&script)
}

/// Writes fencedlock(1), or `fencedlock-SUB(1)` for a subcommand, as roff to stdout.
pub fn man(args: &ManArgs) -> Result<u8, CliError> {
    let root = Cli::command();
    let cmd = match &args.subcommand {
        None => root,
        Some(name) => {
            let names = || root.get_subcommands().filter(|s| !s.is_hide_set()).map(|s| s.get_name());
            let Some(sub) = root.find_subcommand(name).filter(|s| !s.is_hide_set()) else {
                let known = names().collect::<Vec<_>>().join(", ");
                return Err(CliError::Usage(format!("no subcommand {name:?} to show; one of: {known}")));
            };
            // The page's name is the one `man` looks up: fencedlock-run(1).
            let page = format!("fencedlock-{}", sub.get_name());
            sub.clone().name(page.clone()).bin_name(page).version(env!("CARGO_PKG_VERSION"))
        }
    };
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut page)
        .map_err(|e| CliError::Internal(format!("cannot render the manual page: {e}")))?;
    emit(&page)
}

/// Stdout, where a closed pipe (`| head`) is an I/O failure, not a panic.
fn emit(bytes: &[u8]) -> Result<u8, CliError> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(bytes)
        .and_then(|()| stdout.flush())
        .map_err(|e| CliError::Io(format!("cannot write to stdout: {e}")))?;
    Ok(code::OK)
}
