//! What the CLI says about itself, checked in one place against the CLI guide's tables
//! (`docs/cli.md`): the exit codes (`--help` of the root and of every subcommand that lists
//! them, and every man page), the subcommands with what each does and which options it takes,
//! the server and output options only where they act, and man pages that keep their examples
//! as written.

use std::collections::BTreeSet;

use crate::support::*;

/// The subcommands that talk to servers: their help ends with the exit-code table.
const WITH_EXIT_CODES: [&str; 9] =
    ["run", "acquire", "hold", "renew", "release", "status", "list", "elect", "leader"];

fn guide() -> String {
    harness::docs::page("docs/cli.md")
}

/// The rows of the markdown table under `heading` whose header row starts with `header`,
/// each cell trimmed.
fn table(heading: &str, header: &str) -> Vec<Vec<String>> {
    let section = harness::docs::section(&guide(), heading);
    let rows: Vec<Vec<String>> = section
        .lines()
        .skip_while(|l| !l.starts_with(header))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|row| {
            // `\|` inside a cell is a literal bar.
            let row = row.replace("\\|", "\u{1}");
            row.trim().trim_matches('|').split(" | ").map(|c| c.trim().replace('\u{1}', "|")).collect()
        })
        .collect();
    assert!(!rows.is_empty(), "no table {header:?} under {heading:?} in docs/cli.md");
    rows
}

/// The exit-code table as the guide has it: code, meaning (without markdown's backticks).
fn guide_exit_codes() -> Vec<(String, String)> {
    table("## Exit codes", "| exit code | meaning |")
        .into_iter()
        .map(|cells| (cells[0].replace(' ', ""), cells[1].replace('`', "")))
        .collect()
}

/// The exit-code table at the end of a help text or a man page's notes: a row starts with two
/// spaces and its code, its meaning wraps under itself.
fn exit_codes_in(text: &str) -> Vec<(String, String)> {
    let mut listed: Vec<(String, String)> = Vec::new();
    for line in text.lines().skip_while(|l| l.trim() != "Exit codes:").skip(1) {
        if !line.starts_with("  ") {
            break;
        }
        let body = line.trim();
        if !line.starts_with("   ") {
            let (code, meaning) = body.split_once(' ').expect("CODE MEANING");
            listed.push((code.to_string(), meaning.trim().to_string()));
        } else if let Some(last) = listed.last_mut() {
            last.1 = format!("{} {body}", last.1);
        }
    }
    listed
}

/// A man page's text with roff's escapes undone (`\-` a hyphen, `\e` a backslash).
fn man_text(page: &str) -> String {
    page.replace("\\-", "-").replace("\\e", "\\").replace("\\&", "").replace("\\*(Aq", "'")
}

fn help(args: &[&str]) -> String {
    let out = run(args);
    assert_eq!(out.code(), 0, "{args:?}: {out:?}");
    out.stdout
}

fn man(subcommand: Option<&str>) -> String {
    let mut args = vec!["man"];
    args.extend(subcommand);
    help(&args)
}

/// The sections of a help text that list options.
const OPTION_HEADINGS: [&str; 3] = ["Options:", "Server options:", "Output options:"];

/// The long options a help text lists under `heading` (`None`: under any options heading),
/// without `--help`. An option's line is indented at most 6 spaces (`  -k, --key <KEY>`,
/// `      --ttl <DURATION>`); its description, further.
fn long_options(help: &str, heading: Option<&str>) -> BTreeSet<String> {
    let mut current = "";
    let mut options = BTreeSet::new();
    for line in help.lines() {
        if !line.starts_with(' ') && line.ends_with(':') {
            current = line;
            continue;
        }
        let wanted = match heading {
            Some(heading) => current == heading,
            None => OPTION_HEADINGS.contains(&current),
        };
        let trimmed = line.trim_start();
        if !wanted || line.len() - trimmed.len() > 6 || !trimmed.starts_with('-') {
            continue;
        }
        if let Some(long) = trimmed.split_whitespace().find(|w| w.starts_with("--")) {
            let long = long.trim_end_matches(',');
            if long != "--help" {
                options.insert(long.to_string());
            }
        }
    }
    options
}

#[test]
fn one_exit_code_table_in_the_guide_every_help_and_every_man_page() {
    let guide = guide_exit_codes();
    assert!(guide.len() >= 10, "{guide:?}");
    let seventy_eight = &guide.iter().find(|(c, _)| c == "78").expect("78").1;
    for denied in ["FUNCTION", "SCRIPT", "EVAL", "TLS"] {
        assert!(seventy_eight.contains(denied), "78 names {denied}: {seventy_eight}");
    }
    assert_eq!(
        exit_codes_in(&help(&["--help"])),
        guide,
        "fencedlock --help (right) differs from docs/cli.md"
    );
    assert_eq!(exit_codes_in(&man_text(&man(None))), guide, "fencedlock(1)");
    for sub in WITH_EXIT_CODES {
        assert_eq!(exit_codes_in(&help(&[sub, "--help"])), guide, "fencedlock {sub} --help");
        assert_eq!(exit_codes_in(&man_text(&man(Some(sub)))), guide, "fencedlock-{sub}(1)");
    }
}

#[test]
fn the_subcommand_table_is_what_help_and_the_man_pages_say() {
    let rows = table("## The subcommands and their options", "| subcommand | what it does |");
    let root_help = help(&["--help"]);
    let root_man = man_text(&man(None));
    let listed: BTreeSet<String> = root_help
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .filter(|name| name != "help")
        .collect();
    let mut documented: BTreeSet<String> = rows.iter().map(|r| r[0].trim_matches('`').to_string()).collect();
    // `demo` is listed only by builds with the `demo` feature (the suite runs both ways); the
    // guide names it under the table, with the feature it needs.
    if listed.contains("demo") {
        assert!(guide().contains("(`demo`, the billing demo, is in builds with the `demo` feature only"));
        documented.insert("demo".to_string());
    }
    assert_eq!(documented, listed, "docs/cli.md's subcommands (left) and fencedlock --help's (right)");

    let run_help = help(&["run", "--help"]);
    let server = long_options(&run_help, Some("Server options:"));
    let output = long_options(&run_help, Some("Output options:"));
    assert!(
        server.contains("--redis") && server.contains("--tls-key") && output.contains("--json"),
        "{run_help}"
    );
    for row in &rows {
        let sub = row[0].trim_matches('`');
        // What it does: the man page's subcommand list and the page's own name line.
        let about = row[1].replace('`', "");
        let entry = format!("fencedlock-{sub}(1)\n{about}");
        assert!(
            root_man.replace("\\fB", "").replace("\\fR", "").replace('`', "").contains(&entry),
            "fencedlock(1) lacks {entry:?}"
        );
        let page = man_text(&man(Some(sub)));
        assert!(
            page.replace('`', "").contains(&format!(".SH NAME\nfencedlock-{sub} - {about}\n")),
            "fencedlock-{sub}(1)'s name line: {}",
            &page[..400.min(page.len())]
        );
        // Its options: the named ones, and the server and output groups.
        let mut documented = BTreeSet::new();
        for word in row[2].split([' ', ',']).filter(|w| !w.is_empty()) {
            match word {
                "server" => documented.extend(server.iter().cloned()),
                "output" => documented.extend(output.iter().cloned()),
                option => {
                    documented.insert(option.trim_matches('`').to_string());
                }
            }
        }
        let sub_help = help(&[sub, "--help"]);
        assert_eq!(
            documented,
            long_options(&sub_help, None),
            "docs/cli.md's options of {sub} (left) and its --help (right)"
        );
    }
}

#[test]
fn server_and_output_options_are_only_where_they_act() {
    for sub in ["plan", "completions", "man", "functions"] {
        let text = help(&[sub, "--help"]);
        for option in
            ["--redis", "--cluster", "--engine", "--timeout", "--tls-cacert", "--quiet", "--verbose"]
        {
            assert!(!text.contains(option), "{sub} --help offers {option}, which does nothing there");
        }
        // Given before the subcommand, as scripts did, it is refused as after it.
        let out = run(&["--redis", "redis://127.0.0.1:1", sub]);
        assert_one_line_error(&out, USAGE, &["--redis", &format!("fencedlock {sub} --help")]);
    }
    // `run --help`: run's own options first, then the server and the output options, each
    // under its heading.
    let text = help(&["run", "--help"]);
    let at = |heading: &str| {
        text.find(&format!("\n{heading}\n")).unwrap_or_else(|| panic!("no {heading:?}: {text}"))
    };
    assert!(at("Options:") < at("Server options:") && at("Server options:") < at("Output options:"));
    let own = long_options(&text, Some("Options:"));
    assert!(own.contains("--ttl") && own.contains("--label") && !own.contains("--redis"), "{own:?}");
}

#[test]
fn man_pages_name_themselves_once_and_keep_their_examples_as_written() {
    let page = man(None);
    let name = page.lines().skip_while(|l| *l != ".SH NAME").nth(1).expect("a name line");
    assert!(name.starts_with("fencedlock \\- ") && !name.contains("fencedlock:"), "{name}");
    let page = man(Some("run"));
    // The examples in a no-fill block, one per line, as --help shows them.
    let notes = page.split(".SH NOTES\n.nf\n").nth(1).expect("a NOTES section kept as written");
    let notes = &notes[..notes.find("\n.fi").expect("the block ends")];
    let example = "  fencedlock run migrate \\-\\-ttl 30s \\-\\-wait 1m \\-\\- ./migrate.sh";
    assert!(notes.lines().any(|l| l == example), "{notes}");
    let help_text = help(&["run", "--help"]);
    assert!(help_text.contains(&man_text(example)), "the same line in --help");
}
