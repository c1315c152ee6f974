//! The differential run: every case of the table on a module server and on a managed server
//! with the Functions library, step by step (each step to the module, then to the library, so
//! both see the same elapsed times), and every disagreement not in the expected list fails the
//! test with both replies. A library with one broken error text must be caught.

use std::collections::BTreeSet;
use std::time::Instant;

use fencedlock_protocol::functions::{self, LIBRARY};
use fencedlock_protocol::ReplyError;
use harness::redis::{self, Value};
use harness::{error_text, Server};

use crate::cases;
use crate::differences::{self, Expected};
use crate::engines::{
    library_request, managed_with_library, managed_with_script, module_request, send, Fences, Library,
    Outcome, Side,
};
use crate::table::{Arg, Case, Step};

/// A step on which the engines disagreed.
#[derive(Debug)]
pub struct Disagreement {
    pub case: String,
    pub step: usize,
    pub request: String,
    /// `functions` or `script`.
    pub library: &'static str,
    pub module: Outcome,
    pub functions: Outcome,
}

impl std::fmt::Display for Disagreement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} step {}: {}\n    module:    {:?}{}\n    {:<10} {:?}{}",
            self.case,
            self.step,
            self.request,
            self.module.reply,
            waited(&self.module),
            format!("{}:", self.library),
            self.functions.reply,
            waited(&self.functions),
        )
    }
}

fn waited(o: &Outcome) -> &'static str {
    match o.waited {
        Some(true) => " (waited)",
        Some(false) => " (at once)",
        None => "",
    }
}

/// Whether to print every step's pair of replies (`CONFORMANCE_TRACE=1`, with `--nocapture`).
fn trace() -> bool {
    std::env::var_os("CONFORMANCE_TRACE").is_some_and(|v| v == "1")
}

/// The arguments of a step for one side (fences relative to that side's own).
fn resolve(args: &[Arg], key: &[u8], fences: &Fences) -> Vec<Vec<u8>> {
    args.iter()
        .map(|a| match a {
            Arg::Lit(bytes) => bytes.clone(),
            Arg::Key => key.to_vec(),
            Arg::FencePlus(delta) => {
                let base = fences.highest().expect("FencePlus after a fence was replied");
                (base + delta).to_string().into_bytes()
            }
        })
        .collect()
}

fn shown(command: &str, args: &[Vec<u8>]) -> String {
    let mut out = command.to_string();
    for a in args {
        let text = String::from_utf8_lossy(a);
        if text.len() > 40 {
            out.push_str(&format!(" <{} bytes>", a.len()));
        } else {
            out.push_str(&format!(" {text:?}"));
        }
    }
    out
}

/// Runs one case on both servers; the steps where they disagree.
pub fn run_case(module: &Server, functions: &Server, library: &Library, case: &Case) -> Vec<Disagreement> {
    let mut fences = [Fences::default(), Fences::default()];
    let mut out = Vec::new();
    for (i, step) in case.steps.iter().enumerate() {
        match step {
            Step::Sleep(ms) => std::thread::sleep(std::time::Duration::from_millis(*ms)),
            Step::Raw(words) => {
                for server in [module, functions] {
                    let mut cmd = redis::Cmd::new();
                    for w in resolve(words, &case.key, &fences[0]) {
                        cmd.arg(w);
                    }
                    server.query::<Value>(&cmd).unwrap_or_else(|e| {
                        panic!("{} step {i}: set-up failed: {}", case.name, error_text(&e))
                    });
                }
            }
            Step::Call { command, keys, args, timed } => {
                let mut replies = Vec::with_capacity(2);
                let mut request = String::new();
                for (side, server) in Side::BOTH.into_iter().zip([module, functions]) {
                    let slot = side as usize;
                    let resolved = resolve(args, &case.key, &fences[slot]);
                    let cmd = match side {
                        Side::Module => {
                            request = shown(command.name, &resolved);
                            module_request(command, &case.key, *keys, &resolved)
                        }
                        Side::Functions => library_request(library, command, &case.key, *keys, &resolved),
                    };
                    replies.push(send(server, &cmd, command, &mut fences[slot], *timed));
                }
                let functions_reply = replies.pop().expect("two replies");
                let module_reply = replies.pop().expect("two replies");
                if trace() {
                    println!(
                        "{} step {i}: {request}\n    module:    {:?}{}\n    functions: {:?}{}",
                        case.name,
                        module_reply.reply,
                        waited(&module_reply),
                        functions_reply.reply,
                        waited(&functions_reply)
                    );
                }
                if !module_reply.agrees(&functions_reply) {
                    out.push(Disagreement {
                        case: case.name.clone(),
                        step: i,
                        request: format!("{request} ({keys:?})"),
                        library: library.name(),
                        module: module_reply,
                        functions: functions_reply,
                    });
                }
            }
        }
    }
    out
}

/// Runs `cases` and splits the disagreements into unexpected ones (failures) and the expected
/// ones seen; also the expected ones that did not show up (failures too).
pub fn compare(
    module: &Server,
    functions: &Server,
    library: &Library,
    cases: &[Case],
) -> (Vec<Disagreement>, Vec<&'static str>, Vec<&'static str>) {
    let expected = differences::all();
    let mut unexpected = Vec::new();
    let mut seen = BTreeSet::new();
    for case in cases {
        for d in run_case(module, functions, library, case) {
            match expected.iter().find(|e: &&Expected| e.case == d.case && e.step == d.step) {
                Some(e) if (e.matches)(&d.module, &d.functions) => {
                    seen.insert(e.case);
                }
                _ => unexpected.push(d),
            }
        }
    }
    let in_run: BTreeSet<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    let missing = expected
        .iter()
        .filter(|e| in_run.contains(e.case) && !seen.contains(e.case))
        .map(|e| e.case)
        .collect();
    (unexpected, seen.into_iter().collect(), missing)
}

fn report(unexpected: &[Disagreement]) -> String {
    unexpected.iter().map(|d| format!("  {d}\n")).collect()
}

/// Only the cases whose name contains `CONFORMANCE_CASES`, when it is set (e.g. `rw:`): for
/// a look at one group while the other engine does not have it yet.
fn selected(cases: Vec<Case>) -> Vec<Case> {
    match std::env::var("CONFORMANCE_CASES") {
        Ok(part) if !part.is_empty() => cases.into_iter().filter(|c| c.name.contains(&part)).collect(),
        _ => cases,
    }
}

/// Runs the whole table (or the `selected` cases) against `managed` served by `library`; fails
/// with every unexpected difference.
fn run_table(managed: &Server, library: &Library) {
    let started = Instant::now();
    let cases = cases::all();
    let names: BTreeSet<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names.len(), cases.len(), "case names are unique (each case has its own key)");
    let cases = selected(cases);
    print!("{}", differences::describe());

    let module = Server::start();
    let (unexpected, seen, missing) = compare(&module, managed, library, &cases);
    let steps: usize = cases.iter().map(|c| c.steps.len()).sum();
    println!(
        "{} cases, {steps} steps, module vs {} on {} {:?}: {} unexpected, expected seen {seen:?}, in {:?}",
        cases.len(),
        library.name(),
        module.flavor(),
        module.version(),
        unexpected.len(),
        started.elapsed()
    );
    assert!(
        unexpected.is_empty() && missing.is_empty(),
        "the engines differ where no difference is listed ({}):\n{}expected differences not seen: {missing:?}",
        unexpected.len(),
        report(&unexpected)
    );
}

#[test]
fn every_contract_case_gets_the_modules_reply_from_the_library() {
    run_table(&managed_with_library(LIBRARY), &Library::Functions);
}

/// The same library source as a script (`EVALSHA`), on a server whose default user may not
/// run `FUNCTION`: the fallback must answer as the library does.
#[test]
fn every_contract_case_gets_the_modules_reply_from_the_script() {
    let (managed, library) = managed_with_script(functions::eval_script());
    run_table(&managed, &library);
}

/// The comparison can fail: a library whose ttl error text lost one word is caught, on the
/// very cases that send a bad ttl, with both texts in the report.
#[test]
fn a_library_with_one_broken_error_text_is_caught() {
    let good = ReplyError::BadTtl.message(0);
    let broken_text = good.replacen("positive ", "", 1);
    assert_ne!(good, broken_text);
    let broken = LIBRARY.replacen(&format!("'{good}'"), &format!("'{broken_text}'"), 1);
    assert_ne!(broken, LIBRARY, "the library carries the ttl error text");

    let module = Server::start();
    let functions = managed_with_library(&broken);
    let cases: Vec<Case> = cases::all().into_iter().filter(|c| c.name.starts_with("ttl:bad-0")).collect();
    assert!(!cases.is_empty());
    let (unexpected, _, _) = compare(&module, &functions, &Library::Functions, &cases);
    let text = report(&unexpected);
    assert!(!unexpected.is_empty(), "a broken error text went unnoticed");
    assert!(text.contains(&good) && text.contains(&broken_text), "{text}");
}
