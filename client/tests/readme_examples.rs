//! The manual's Rust examples (the front page, `README.md`, and the pages under `docs/`) are
//! compiled code shown verbatim, so a snippet compiles as pasted and cannot drift from its
//! source. The comment line above each ```rust block names its source:
//!
//! - `<!-- client/examples/NAME.rs -->`: the whole file (the examples are built with the
//!   workspace);
//! - `<!-- doctest: PATH -->`: the first example in the crate docs (`//!`) of the file at PATH
//!   (relative to the workspace root), without its hidden `# ` lines (compiled by its crate's
//!   doc tests).
//!
//! A block without such a comment, or differing from its source by a byte, fails here; so does
//! a `client/examples/readme_*.rs` file that no page shows.

use std::path::{Path, PathBuf};

/// The comment line above a ```rust block naming its source.
const MARKER_OPEN: &str = "<!-- ";
const MARKER_CLOSE: &str = " -->";
/// A marker naming a crate doc example rather than a whole file.
const DOCTEST: &str = "doctest: ";
/// The example files written for the manual (the other examples are not shown in it).
const README_PREFIX: &str = "readme_";
/// The manual: its front page, and the folder of its other pages.
const FRONT_PAGE: &str = "README.md";
const DOCS_DIR: &str = "docs";

#[derive(Debug, PartialEq)]
struct Shown {
    /// What the marker names (`client/examples/x.rs`, `doctest: guard/src/lib.rs`), or `None`
    /// for a block with no marker.
    source: Option<String>,
    body: String,
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every page of the manual, relative to the workspace root.
fn manual_pages() -> Vec<String> {
    let dir = workspace_root().join(DOCS_DIR);
    let mut pages: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("{DOCS_DIR}/{name}"))
        .collect();
    pages.sort();
    pages.insert(0, FRONT_PAGE.to_string());
    pages
}

fn read(relative: &str) -> String {
    let path = workspace_root().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn rust_blocks(page: &str) -> Vec<Shown> {
    let lines: Vec<&str> = page.lines().collect();
    let mut shown = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim_end() != "```rust" {
            i += 1;
            continue;
        }
        let source = i
            .checked_sub(1)
            .and_then(|above| lines[above].strip_prefix(MARKER_OPEN))
            .and_then(|rest| rest.strip_suffix(MARKER_CLOSE))
            .map(str::to_string);
        let end = (i + 1..lines.len()).find(|&j| lines[j].trim_end() == "```").unwrap_or(lines.len());
        let body: String = lines[i + 1..end].iter().map(|l| format!("{l}\n")).collect();
        shown.push(Shown { source, body });
        i = end + 1;
    }
    shown
}

/// The first fenced example in a file's `//!` crate docs, as rustdoc shows it: without the
/// lines hidden by `# `.
fn first_doc_example(file: &str) -> Option<String> {
    let docs: Vec<Option<&str>> =
        file.lines().map(|l| if l == "//!" { Some("") } else { l.strip_prefix("//! ") }).collect();
    let open = docs.iter().position(|l| l.is_some_and(|l| l.starts_with("```")))?;
    let close = (open + 1..docs.len()).find(|&j| docs[j].is_some_and(|l| l.trim() == "```"))?;
    let shown = docs[open + 1..close]
        .iter()
        .map(|l| l.unwrap_or_default())
        .filter(|l| *l != "#" && !l.starts_with("# "))
        .map(|l| format!("{l}\n"))
        .collect();
    Some(shown)
}

/// The text a marker's source says the block must be.
fn source_text(source: &str) -> String {
    match source.strip_prefix(DOCTEST) {
        Some(path) => {
            first_doc_example(&read(path)).unwrap_or_else(|| panic!("{path} has no crate doc example"))
        }
        None => read(source),
    }
}

fn readme_example_files() -> Vec<String> {
    let dir = workspace_root().join("client/examples");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(README_PREFIX))
        .map(|name| format!("client/examples/{name}"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_rust_block_of_the_manual_is_its_source_verbatim() {
    let mut shown = Vec::new();
    for page in manual_pages() {
        for block in rust_blocks(&read(&page)) {
            let source = block.source.clone().unwrap_or_else(|| {
                panic!(
                    "{page}: a ```rust block without `{MARKER_OPEN}client/examples/NAME.rs{MARKER_CLOSE}` or \
                     `{MARKER_OPEN}{DOCTEST}PATH{MARKER_CLOSE}` above it:\n{}",
                    block.body
                )
            });
            assert!(
                source_text(&source) == block.body,
                "{page}: the block for {source} differs from its source; paste the source again"
            );
            shown.push(source);
        }
    }
    assert!(shown.len() >= 6, "the manual's Rust examples were not found: {shown:?}");
    for file in readme_example_files() {
        assert!(shown.contains(&file), "{file} is written for the manual but no page shows it");
    }
}

#[test]
fn a_block_is_read_with_the_source_named_above_it() {
    let page =
        "text\n<!-- client/examples/readme_a.rs -->\n```rust\nfn main() {}\n```\n```rust\nlet x = 1;\n```\n";
    assert_eq!(
        rust_blocks(page),
        vec![
            Shown { source: Some("client/examples/readme_a.rs".into()), body: "fn main() {}\n".into() },
            Shown { source: None, body: "let x = 1;\n".into() },
        ]
    );
}

#[test]
fn a_doc_example_is_shown_without_its_hidden_lines() {
    let file = "//! Intro.\n//!\n//! ```no_run\n//! # fn f() {\n//! let x = 1;\n//!\n//! #\n//! use(x);\n\
                //! # }\n//! ```\n//!\n//! ```text\n//! later\n//! ```\n";
    assert_eq!(first_doc_example(file).as_deref(), Some("let x = 1;\n\nuse(x);\n"));
    assert_eq!(first_doc_example("//! No example.\n"), None);
}
