//! Every page under `docs/` is linked from the front page, and every relative link in the
//! front page and the pages under `docs/` reaches an existing file (a page, a source file, a
//! folder) and, when it names one, an existing heading of the Markdown page it reaches.

use std::path::{Component, Path, PathBuf};

use harness::docs::{page, pages, FRONT_PAGE};
use harness::workspace_root;

use crate::markdown::{anchors, link_targets};

/// Links that leave the repository are not checked: the tests reach no network.
fn is_external(target: &str) -> bool {
    ["http://", "https://", "mailto:"].iter().any(|scheme| target.starts_with(scheme))
}

/// `base/../x` as `x`, without touching the file system (the target may be missing).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// What is wrong with each relative link of the page at `page_path` (relative to `root`),
/// one line per broken link; empty when every link resolves.
fn broken_links(root: &Path, page_path: &str, text: &str) -> Vec<String> {
    let dir = Path::new(page_path).parent().unwrap_or(Path::new(""));
    let mut broken = Vec::new();
    for target in link_targets(text).into_iter().filter(|t| !is_external(t)) {
        let (file, anchor) = target.split_once('#').map_or((target.as_str(), None), |(f, a)| (f, Some(a)));
        let reached = if file.is_empty() { PathBuf::from(page_path) } else { normalize(&dir.join(file)) };
        let on_disk = root.join(&reached);
        if !on_disk.exists() {
            broken.push(format!("{page_path}: ({target}): no file {}", reached.display()));
            continue;
        }
        let Some(anchor) = anchor else { continue };
        if reached.extension().is_none_or(|ext| ext != "md") {
            broken
                .push(format!("{page_path}: ({target}): an anchor into a file that is not a Markdown page"));
            continue;
        }
        let headings = std::fs::read_to_string(&on_disk).map(|t| anchors(&t)).unwrap_or_default();
        if !headings.iter().any(|h| h == anchor) {
            broken.push(format!("{page_path}: ({target}): {} has no heading #{anchor}", reached.display()));
        }
    }
    broken
}

/// The pages the front page links to, as paths relative to the workspace root.
fn linked_from(page_path: &str, text: &str) -> Vec<PathBuf> {
    let dir = Path::new(page_path).parent().unwrap_or(Path::new(""));
    link_targets(text)
        .iter()
        .filter(|t| !is_external(t))
        .map(|t| t.split('#').next().unwrap_or_default())
        .filter(|file| !file.is_empty())
        .map(|file| normalize(&dir.join(file)))
        .collect()
}

#[test]
fn every_docs_page_is_linked_from_the_front_page() {
    let all = pages();
    assert!(all.len() > 5, "the manual's pages were not found: {all:?}");
    let linked = linked_from(FRONT_PAGE, &page(FRONT_PAGE));
    let orphans: Vec<&String> =
        all.iter().filter(|p| p.as_str() != FRONT_PAGE && !linked.contains(&PathBuf::from(p))).collect();
    assert!(orphans.is_empty(), "pages the front page does not link: {orphans:?}");
}

#[test]
fn every_relative_link_of_the_manual_resolves() {
    let mut checked = 0;
    let mut broken = Vec::new();
    for path in pages() {
        let text = page(&path);
        checked += link_targets(&text).len();
        broken.extend(broken_links(workspace_root(), &path, &text));
    }
    assert!(checked > 20, "the manual's links were not found: {checked}");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn a_missing_file_or_heading_is_reported() {
    let root = tempfile::tempdir().expect("a temp dir");
    std::fs::create_dir(root.path().join("docs")).expect("docs/");
    std::fs::write(root.path().join("docs/b.md"), "# B\n## Exit codes\n").expect("docs/b.md");
    std::fs::write(root.path().join("code.rs"), "").expect("code.rs");
    let text = "# A\n[ok](b.md#exit-codes) [self](#a) [up](../code.rs) [web](https://example.invalid/x)\n\
                [gone](c.md) [no heading](b.md#exit-code) [not md](../code.rs#x) [no own](#b)\n";
    std::fs::write(root.path().join("docs/a.md"), text).expect("docs/a.md");
    assert_eq!(
        broken_links(root.path(), "docs/a.md", text),
        vec![
            "docs/a.md: (c.md): no file docs/c.md",
            "docs/a.md: (b.md#exit-code): docs/b.md has no heading #exit-code",
            "docs/a.md: (../code.rs#x): an anchor into a file that is not a Markdown page",
            "docs/a.md: (#b): docs/a.md has no heading #b",
        ]
    );
}
