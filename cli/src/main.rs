//! `fencedlock`: run a command under a distributed lease with a fencing token (cron
//! coordination), script-level acquire / hold / renew / release / status, the held locks
//! (`list`), leader election from the shell (`elect`, `leader`), lease sizing (`plan`), shell
//! completions and the manual page, and (with the `demo` feature) the billing demo.
//!
//! Owns the command line: options, exit codes, messages, the child process. Takes every lease
//! through the `fencedlock` client crate and must not talk to the lock servers on its own, nor
//! match server error text (errors are classified by kind, see `diagnose`).

mod args;
#[cfg(feature = "demo")]
mod demo;
mod diagnose;
mod docs;
mod duration;
mod elect;
mod error;
mod hold;
mod list;
mod logging;
mod output;
mod plan;
mod run;
mod script;
mod servers;
mod show;
mod token_io;
mod urls;

use std::process::ExitCode;

use clap::Parser;

use args::{Cli, Command};
use error::{code, CliError};
use output::Output;
use run::signals::Signals;

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|arg| arg == run::guardian::ARG) {
        return run::guardian::main(&args[2..]);
    }
    let args = args::leading::move_after_subcommand(args);
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(err) => return usage_error(&err, &args),
    };
    let output = cli.command.output();
    logging::init(output.verbose, output.quiet);
    let out = Output { json: output.json, quiet: output.quiet };
    // One thread is all a CLI needs (the command runs under its guardian, `run/guardian.rs`).
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            out.error(&CliError::Internal(format!("cannot start the async runtime: {e}")));
            return ExitCode::from(code::INTERNAL);
        }
    };
    let result = runtime.block_on(dispatch(&cli, out));
    // Background releases (a dropped lease) get a moment; nothing waits longer than that.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    match result {
        Ok(exit) => ExitCode::from(exit),
        Err(err) => {
            out.error(&err);
            ExitCode::from(err.exit_code())
        }
    }
}

async fn dispatch(cli: &Cli, out: Output) -> Result<u8, CliError> {
    let signals =
        || Signals::install().map_err(|e| CliError::Internal(format!("cannot install signal handlers: {e}")));
    match &cli.command {
        Command::Run(args) => run::run(args, out, &mut signals()?).await,
        Command::Acquire(args) => script::acquire(args, out).await,
        Command::Hold(args) => hold::hold(args, out, &mut signals()?).await,
        Command::Renew(args) => script::renew(args, out).await,
        Command::Release(args) => script::release(args, out).await,
        Command::Status(args) => script::status(args, out).await,
        Command::List(args) => list::list(args, out).await,
        Command::Elect(args) => elect::elect(args, out, &mut signals()?).await,
        Command::Leader(args) => elect::leader(args, out, &mut signals()?).await,
        Command::Plan(args) => plan::run(args, out),
        #[cfg(feature = "demo")]
        Command::Demo(args) => demo::run(args, out).await,
        #[cfg(not(feature = "demo"))]
        Command::Demo(_) => Err(CliError::Usage(
            "this fencedlock was built without the billing demo (it brings SQLite); run it from a checkout: cargo run -p fencedlock-cli --features demo -- demo".into(),
        )),
        Command::Functions(args) => {
            use fencedlock_protocol::functions;
            match &args.floor_key {
                Some(key) => {
                    let (floor, wake) = (functions::floor_key(key.as_bytes()), functions::wake_key(key.as_bytes()));
                    let (floor, wake) = (String::from_utf8_lossy(&floor), String::from_utf8_lossy(&wake));
                    out.result(
                        &format!("floor {floor}\nwake  {wake}"),
                        serde_json::json!({ "key": key, "floor": floor, "wake": wake }),
                    );
                }
                None => {
                    use std::io::Write;
                    let source = if args.script { functions::eval_script() } else { functions::LIBRARY };
                    // A reader that stops early (`| head`) is not an error.
                    let _ = std::io::stdout().lock().write_all(source.as_bytes());
                }
            }
            Ok(code::OK)
        }
        Command::Completions(args) => docs::completions(args),
        Command::Man(args) => docs::man(args),
    }
}

/// Prints clap's help / version as usual, and any parse error as one line with exit 64.
fn usage_error(err: &clap::Error, args: &[std::ffi::OsString]) -> ExitCode {
    use clap::error::ErrorKind;
    match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = err.print();
            return ExitCode::SUCCESS;
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = err.print();
            return ExitCode::from(code::USAGE);
        }
        _ => {}
    }
    let rendered = err.render().to_string();
    let first_paragraph = rendered.split("\n\n").next().unwrap_or_default();
    let line = first_paragraph.split_whitespace().collect::<Vec<_>>().join(" ");
    let line = line.strip_prefix("error: ").unwrap_or(&line);
    // Subcommand names from the parser itself, so a new subcommand gets its own help hint.
    let parser = <Cli as clap::CommandFactory>::command();
    let words = || args.iter().skip(1).map(|a| a.to_string_lossy());
    // By name or alias (`ls`), as the subcommand's own name.
    let subcommand = words().find_map(|word| {
        parser
            .get_subcommands()
            .find(|sub| sub.get_name() == word || sub.get_all_aliases().any(|alias| alias == word))
            .map(|sub| sub.get_name().to_owned())
    });
    let help = match &subcommand {
        Some(sub) => format!("fencedlock {sub} --help"),
        None => "fencedlock --help".to_string(),
    };
    let json = words().any(|a| a == "--json");
    let starts_a_command = matches!(subcommand.as_deref(), Some("run" | "elect"));
    let hint = if starts_a_command && !names_a_command(args) {
        let sub = subcommand.as_deref().unwrap_or("run");
        format!("; the command goes after `--` (fencedlock {sub} KEY -- CMD ARGS...), or is a shell string in -c 'CMD'")
    } else if subcommand.as_deref() == Some("renew")
        && err.kind() == clap::error::ErrorKind::MissingRequiredArgument
        && line.contains("--ttl")
    {
        "; renew needs the lease's ttl: the server keeps only the lease's deadline, not the ttl it was granted with".to_string()
    } else {
        String::new()
    };
    let err = CliError::Usage(format!("{line}{hint} (see `{help}`)"));
    Output { json, quiet: false }.error(&err);
    ExitCode::from(code::USAGE)
}

/// Whether `run`'s (or `elect`'s) command line has its command: a `--` or a `-c` string.
/// Without either, a flock or etcdctl habit (`run KEY CMD ARGS`) is the likeliest cause of the
/// parse error.
fn names_a_command(args: &[std::ffi::OsString]) -> bool {
    args.iter().skip(1).any(|a| {
        let a = a.to_string_lossy();
        a == "--" || a == "-c" || a.starts_with("--command") || (a.starts_with("-c") && !a.starts_with("--"))
    })
}
