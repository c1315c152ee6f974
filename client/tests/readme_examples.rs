//! The README's Rust examples are the files of `client/examples/` they name, shown whole, so
//! a snippet compiles as pasted (the examples are built with the workspace) and cannot drift
//! from its file: a ```rust block without its file's name above it, or differing from that
//! file by a byte, fails here.

use std::path::{Path, PathBuf};

/// The line above a ```rust block naming the file it shows.
const MARKER_OPEN: &str = "<!-- client/examples/";
const MARKER_CLOSE: &str = " -->";
/// The example files written for the README (the other examples are not shown in it).
const README_PREFIX: &str = "readme_";

#[derive(Debug, PartialEq)]
struct Shown {
    /// The file name under `client/examples/`, or `None` for a block with no marker.
    file: Option<String>,
    body: String,
}

fn client_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn rust_blocks(readme: &str) -> Vec<Shown> {
    let lines: Vec<&str> = readme.lines().collect();
    let mut shown = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim_end() != "```rust" {
            i += 1;
            continue;
        }
        let file = i
            .checked_sub(1)
            .and_then(|above| lines[above].strip_prefix(MARKER_OPEN))
            .and_then(|rest| rest.strip_suffix(MARKER_CLOSE))
            .map(str::to_string);
        let end = (i + 1..lines.len()).find(|&j| lines[j].trim_end() == "```").unwrap_or(lines.len());
        let body: String = lines[i + 1..end].iter().map(|l| format!("{l}\n")).collect();
        shown.push(Shown { file, body });
        i = end + 1;
    }
    shown
}

fn readme_example_files() -> Vec<PathBuf> {
    let dir = client_dir().join("examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(README_PREFIX)))
        .collect();
    files.sort();
    files
}

#[test]
fn every_readme_rust_block_is_its_example_file_verbatim() {
    let readme_path = client_dir().join("../README.md");
    let readme = std::fs::read_to_string(&readme_path).unwrap_or_else(|e| panic!("read README.md: {e}"));
    let shown = rust_blocks(&readme);
    assert!(shown.len() >= 6, "the README's Rust examples were not found: {}", shown.len());
    for block in &shown {
        let name = block.file.as_deref().unwrap_or_else(|| {
            panic!("a ```rust block without `{MARKER_OPEN}NAME.rs{MARKER_CLOSE}` above it:\n{}", block.body)
        });
        let path = client_dir().join("examples").join(name);
        let file = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        assert!(file == block.body, "README's block for {name} differs from the file; paste the file again");
    }
    for path in readme_example_files() {
        let name = path.file_name().and_then(|n| n.to_str()).expect("a UTF-8 file name");
        assert!(
            shown.iter().any(|b| b.file.as_deref() == Some(name)),
            "client/examples/{name} is written for the README but not shown in it"
        );
    }
}

#[test]
fn a_block_is_read_with_the_file_named_above_it() {
    let readme =
        "text\n<!-- client/examples/readme_a.rs -->\n```rust\nfn main() {}\n```\n```rust\nlet x = 1;\n```\n";
    assert_eq!(
        rust_blocks(readme),
        vec![
            Shown { file: Some("readme_a.rs".into()), body: "fn main() {}\n".into() },
            Shown { file: None, body: "let x = 1;\n".into() },
        ]
    );
}
