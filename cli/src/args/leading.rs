//! Options given before the subcommand (`fencedlock --redis URL status k`, the order scripts
//! written for earlier versions use) are the subcommand's: they are moved right after its
//! name before clap parses, so each subcommand takes only the options it uses and
//! `fencedlock --redis URL plan` is refused as `fencedlock plan --redis URL` is.

use std::ffi::{OsStr, OsString};

use clap::CommandFactory;

use super::Cli;

/// An option the subcommands may take, as clap knows it.
struct Known {
    long: String,
    short: Option<char>,
    takes_value: bool,
}

/// `argv` (program name first) with the options before the subcommand moved after it. Stops
/// at the first word it does not know as such an option (`--help`, `--version`, a typo), so
/// clap reports it as usual; without a subcommand nothing moves.
pub fn move_after_subcommand(argv: Vec<OsString>) -> Vec<OsString> {
    let root = Cli::command();
    let known = options(&root);
    let is_subcommand = |word: &OsStr| {
        root.get_subcommands().any(|sub| sub.get_all_aliases().chain([sub.get_name()]).any(|n| word == n))
    };
    let mut leading = Vec::new();
    let mut at = 1;
    while let Some(word) = argv.get(at) {
        if is_subcommand(word) {
            let mut moved = vec![argv[0].clone(), argv[at].clone()];
            moved.extend(leading);
            moved.extend_from_slice(&argv[at + 1..]);
            return moved;
        }
        let taken = option_words(word, argv.get(at + 1), &known);
        if taken == 0 {
            break;
        }
        leading.extend_from_slice(&argv[at..at + taken]);
        at += taken;
    }
    argv
}

/// How many words the option at `word` takes up (itself and its value), 0 if it is none of
/// `known`.
fn option_words(word: &OsStr, next: Option<&OsString>, known: &[Known]) -> usize {
    let Some(word) = word.to_str() else { return 0 };
    if let Some(long) = word.strip_prefix("--") {
        let (name, inline) = match long.split_once('=') {
            Some((name, _)) => (name, true),
            None => (long, false),
        };
        return match known.iter().find(|k| k.long == name) {
            Some(k) if k.takes_value && !inline => {
                if next.is_some() {
                    2
                } else {
                    1
                }
            }
            Some(_) => 1,
            None => 0,
        };
    }
    // A cluster of short flags (`-qv`, `-vv`); a short option with a value takes the rest.
    let Some(shorts) = word.strip_prefix('-').filter(|s| !s.is_empty()) else { return 0 };
    for (i, c) in shorts.char_indices() {
        match known.iter().find(|k| k.short == Some(c)) {
            Some(k) if k.takes_value => {
                let attached = i + c.len_utf8() < shorts.len();
                return if attached || next.is_none() { 1 } else { 2 };
            }
            Some(_) => {}
            None => return 0,
        }
    }
    1
}

/// The options of the subcommands that take the server and output options (`run` has them
/// all), which scripts may have put before the subcommand.
fn options(root: &clap::Command) -> Vec<Known> {
    let Some(run) = root.find_subcommand("run") else { return Vec::new() };
    let shared = ["Server options", "Output options"];
    run.get_arguments()
        .filter(|arg| arg.get_help_heading().is_some_and(|h| shared.contains(&h)))
        .filter_map(|arg| {
            Some(Known {
                long: arg.get_long()?.to_owned(),
                short: arg.get_short(),
                takes_value: arg.get_num_args().is_some_and(|n| n.takes_values())
                    || matches!(arg.get_action(), clap::ArgAction::Set | clap::ArgAction::Append),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moved(words: &[&str]) -> Vec<String> {
        let argv = std::iter::once("fencedlock").chain(words.iter().copied()).map(OsString::from).collect();
        move_after_subcommand(argv).into_iter().skip(1).map(|w| w.into_string().unwrap()).collect()
    }

    #[test]
    fn leading_server_and_output_options_follow_the_subcommand() {
        assert_eq!(
            moved(&["--cluster", "--redis", "redis://a:1", "-qv", "--json", "status", "k"]),
            ["status", "--cluster", "--redis", "redis://a:1", "-qv", "--json", "k"]
        );
        assert_eq!(
            moved(&["--timeout=1s", "--engine", "module", "run", "k", "--", "--redis"]),
            ["run", "--timeout=1s", "--engine", "module", "k", "--", "--redis"]
        );
        assert_eq!(moved(&["--redis", "redis://a:1", "ls", "p"]), ["ls", "--redis", "redis://a:1", "p"]);
        // Where it has nothing to do, the subcommand refuses it as clap does any other.
        assert_eq!(moved(&["--redis", "redis://a:1", "plan"]), ["plan", "--redis", "redis://a:1"]);
    }

    #[test]
    fn anything_else_is_left_for_clap() {
        assert_eq!(moved(&["--help"]), ["--help"]);
        assert_eq!(moved(&["--bogus", "status", "k"]), ["--bogus", "status", "k"]);
        assert_eq!(moved(&["--redis", "redis://a:1"]), ["--redis", "redis://a:1"]);
        assert_eq!(moved(&["status", "--json", "k"]), ["status", "--json", "k"]);
    }
}
