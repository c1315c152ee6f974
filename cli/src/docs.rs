//! `fencedlock completions` and `fencedlock man`: generated from the same clap definitions as
//! `--help`, so an installed binary carries its own completions and manual and they cannot
//! drift from the options it parses.

use std::io::Write;

use clap::CommandFactory;
use clap_mangen::Man;

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
    let after = cmd.get_after_help().map(|text| text.to_string());
    let man = clap_mangen::Man::new(cmd.clone());
    let mut page = Vec::new();
    let sections = [
        Man::render_title,
        Man::render_name_section,
        Man::render_synopsis_section,
        Man::render_description_section,
        Man::render_options_section,
    ];
    let mut rendered: std::io::Result<()> = sections.iter().try_for_each(|section| section(&man, &mut page));
    if cmd.has_subcommands() {
        rendered = rendered.and_then(|()| man.render_subcommands_section(&mut page));
    }
    if let Some(after) = after {
        page.extend_from_slice(verbatim_section("NOTES", &after).as_bytes());
    }
    rendered = rendered.and_then(|()| man.render_version_section(&mut page));
    rendered.map_err(|e| CliError::Internal(format!("cannot render the manual page: {e}")))?;
    emit(&page)
}

/// A manual section whose text keeps its lines as written (`.nf`): the notes, examples and
/// exit-code table after the options are laid out by hand, and filling them would run the
/// examples together into one paragraph.
fn verbatim_section(title: &str, text: &str) -> String {
    let mut roff = format!(".SH {title}\n.nf\n");
    for line in text.lines() {
        roff.push_str(&escape_roff_line(line));
        roff.push('\n');
    }
    roff.push_str(".fi\n");
    roff
}

/// One line of text as roff shows it: backslashes and hyphens escaped (a `-` would print as a
/// hyphen, not the minus of an option), and a leading `.` or `'` kept from being a request.
fn escape_roff_line(line: &str) -> String {
    let mut escaped = String::with_capacity(line.len() + 8);
    if line.starts_with('.') || line.starts_with('\'') {
        escaped.push_str("\\&");
    }
    for c in line.chars() {
        match c {
            '\\' => escaped.push_str("\\e"),
            '-' => escaped.push_str("\\-"),
            c => escaped.push(c),
        }
    }
    escaped
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbatim_text_stays_text() {
        assert_eq!(escape_roff_line(".hidden"), "\\&.hidden");
        assert_eq!(escape_roff_line("a --flag \\n"), "a \\-\\-flag \\en");
        let section = verbatim_section("NOTES", "Examples:\n  fencedlock run k -- true");
        assert_eq!(section, ".SH NOTES\n.nf\nExamples:\n  fencedlock run k \\-\\- true\n.fi\n");
    }
}
