//! The manual as the tests that check it read it: the front page (`README.md`) and the pages
//! under `docs/`, and one section of a page by its heading. Headings inside fenced code blocks
//! (`# fencedlock` in an `INFO` reply, `#[tokio::main]`) are text, not headings.

use std::path::PathBuf;

use crate::paths::workspace_root;

/// The front page, relative to the workspace root.
pub const FRONT_PAGE: &str = "README.md";
/// The folder of the manual's pages, relative to the workspace root.
pub const DOCS_DIR: &str = "docs";

/// The text of a page, by its path relative to the workspace root (`"docs/cli.md"`).
///
/// Panics with the path when the page cannot be read: a test of a page that moved must say
/// where it looked.
pub fn page(relative: &str) -> String {
    let path = workspace_root().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read the page {}: {e}", path.display()))
}

/// Every page of the manual, relative to the workspace root: the front page, then
/// `docs/*.md` in name order.
pub fn pages() -> Vec<String> {
    let dir = workspace_root().join(DOCS_DIR);
    let mut docs: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.unwrap_or_else(|e| panic!("list {}: {e}", dir.display())).path())
        .filter(|p| p.extension().is_some_and(|ext| ext == "md"))
        .filter_map(|p: PathBuf| p.file_name().and_then(|n| n.to_str()).map(|n| format!("{DOCS_DIR}/{n}")))
        .collect();
    docs.sort();
    let mut all = vec![FRONT_PAGE.to_string()];
    all.extend(docs);
    all
}

/// A heading line outside code: its level (the number of `#`) and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heading {
    /// 1 for `#`, 2 for `##`, …
    pub level: usize,
    /// The words after the `#`s.
    pub text: String,
    /// The 0-based line number of the heading in its page.
    pub line: usize,
}

/// The page's headings, in order, skipping fenced code blocks.
pub fn headings(page: &str) -> Vec<Heading> {
    let mut in_code = false;
    let mut found = Vec::new();
    for (line, text) in page.lines().enumerate() {
        if text.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let level = text.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&level) && text[level..].starts_with(' ') {
            found.push(Heading { level, text: text[level + 1..].trim().to_string(), line });
        }
    }
    found
}

/// The body of the section whose heading line is exactly `heading` (`"## Exit codes"`): the
/// lines after it up to the next heading of the same or a higher level.
///
/// Panics naming the heading when the page has no such section.
pub fn section(page: &str, heading: &str) -> String {
    let all = headings(page);
    let start = all
        .iter()
        .position(|h| format!("{} {}", "#".repeat(h.level), h.text) == heading)
        .unwrap_or_else(|| panic!("no section `{heading}` on the page"));
    let level = all[start].level;
    let end = all[start + 1..].iter().find(|h| h.level <= level).map(|h| h.line);
    let lines: Vec<&str> = page.lines().collect();
    let body = &lines[all[start].line + 1..end.unwrap_or(lines.len())];
    body.iter().map(|l| format!("{l}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "# Title\nintro\n## A\na1\n```text\n# not a heading\n## nor this\n```\n\
                        ### A.1\na2\n## B\nb1\n";

    #[test]
    fn headings_inside_code_are_text() {
        let levels: Vec<(usize, String)> = headings(PAGE).into_iter().map(|h| (h.level, h.text)).collect();
        let expected = [(1, "Title"), (2, "A"), (3, "A.1"), (2, "B")].map(|(l, t)| (l, t.to_string()));
        assert_eq!(levels, expected);
    }

    #[test]
    fn a_section_runs_to_the_next_heading_of_its_level_or_higher() {
        assert_eq!(section(PAGE, "## A"), "a1\n```text\n# not a heading\n## nor this\n```\n### A.1\na2\n");
        assert_eq!(section(PAGE, "### A.1"), "a2\n");
        assert_eq!(section(PAGE, "## B"), "b1\n");
    }

    #[test]
    #[should_panic(expected = "no section `## C`")]
    fn a_missing_section_is_named() {
        section(PAGE, "## C");
    }

    #[test]
    fn the_manual_has_its_front_page_and_docs() {
        let all = pages();
        assert_eq!(all[0], FRONT_PAGE);
        assert!(all.iter().any(|p| p == "docs/cli.md"), "{all:?}");
        assert!(page(FRONT_PAGE).starts_with("# fencedlock"));
    }
}
