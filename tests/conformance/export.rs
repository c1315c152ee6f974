//! The contract cases as data: `protocol/corpus/conformance.json`, rendered from the table
//! this suite runs ([`cases::all`]) and its expected differences, so that every other client
//! runs the same cases through its own request builders (the corpus README says how). The
//! test fails when the committed file differs from the table;
//! `FENCEDLOCK_BLESS=1 cargo test -p fencedlock-tests --test conformance export` rewrites it.

use fencedlock_protocol::command::Command;
use harness::workspace_root;
use serde_json::{json, Value as Json};

use crate::cases;
use crate::engines::Keys;
use crate::table::{Arg, Step};

const PATH: &str = "protocol/corpus/conformance.json";

/// A byte string as the contract's data writes one: text when it is UTF-8, else `{"hex"}`.
fn bytes(b: &[u8]) -> Json {
    match std::str::from_utf8(b) {
        Ok(text) => json!(text),
        Err(_) => json!({ "hex": b.iter().map(|x| format!("{x:02x}")).collect::<String>() }),
    }
}

fn arg(a: &Arg) -> Json {
    match a {
        Arg::Lit(b) => bytes(b),
        Arg::FencePlus(n) => json!({ "fence_plus": n }),
        Arg::Key => json!({ "key": true }),
    }
}

fn keys(k: Keys) -> Json {
    match k {
        Keys::WithFloor => json!("with_floor"),
        Keys::KeyOnly => json!("key_only"),
        Keys::None => json!("none"),
        Keys::Member(suffix) => json!({ "member": suffix }),
        Keys::Set(suffixes) => json!({ "set": suffixes }),
    }
}

fn call(command: &Command, k: Keys, args: &[Arg], timed: Option<u64>) -> Json {
    let mut step =
        json!({ "call": command.name, "keys": keys(k), "args": args.iter().map(arg).collect::<Vec<_>>() });
    if let Some(ms) = timed {
        step["block_ms"] = json!(ms);
    }
    step
}

fn render() -> String {
    let cases: Vec<Json> = cases::all()
        .iter()
        .map(|case| {
            let steps: Vec<Json> = case
                .steps
                .iter()
                .map(|step| match step {
                    Step::Call { command, keys: k, args, timed } => call(command, *k, args, *timed),
                    Step::Raw(words) => json!({ "raw": words.iter().map(arg).collect::<Vec<_>>() }),
                    Step::Sleep(ms) => json!({ "sleep_ms": ms }),
                })
                .collect();
            json!({ "name": case.name, "key": bytes(&case.key), "steps": steps })
        })
        .collect();
    let differences: Vec<Json> = crate::differences::all()
        .iter()
        .map(|d| {
            let why: String = d.why.split_whitespace().collect::<Vec<_>>().join(" ");
            json!({ "case": d.case, "step": d.step, "why": why })
        })
        .collect();
    let corpus = json!({
        "schema": 1,
        "about": "The command contract's cases: each is sent to a module server and to the Functions library (FCALL, and the same source as a script by EVALSHA) on managed servers, and every reply must agree with the module's once normalised (protocol/corpus/README.md). Rendered from the Rust conformance suite's table (tests/conformance/cases.rs); never edit by hand.",
        "differences": differences,
        "cases": cases,
    });
    let mut text = serde_json::to_string_pretty(&corpus).expect("JSON renders");
    text.push('\n');
    text
}

#[test]
fn the_corpus_file_is_the_table() {
    let path = workspace_root().join(PATH);
    let rendered = render();
    if std::env::var_os("FENCEDLOCK_BLESS").is_some() {
        std::fs::write(&path, &rendered).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == rendered,
        "{PATH} is not the conformance table: run `FENCEDLOCK_BLESS=1 cargo test -p fencedlock-tests --test conformance export` and commit it"
    );
}
