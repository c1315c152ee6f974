//! Just enough Markdown for checking links: the link targets of a page outside code, and the
//! anchors GitHub gives its headings.

use harness::docs::headings;

/// The target of every inline link (`[text](target)`) outside fenced code blocks and code
/// spans, in page order.
pub fn link_targets(page: &str) -> Vec<String> {
    let mut in_code = false;
    let mut targets = Vec::new();
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let prose = without_code_spans(line);
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            targets.push(after[..end].to_string());
            rest = &after[end + 1..];
        }
    }
    targets
}

/// The line with each code span (a run of backticks to the next run of as many) removed, so
/// that `` `[x](y)` `` shown as code is no link. An opening run that never closes is text.
fn without_code_spans(line: &str) -> String {
    let runs = backtick_runs(line);
    let mut kept = String::new();
    let mut from = 0;
    let mut i = 0;
    while i < runs.len() {
        let (open, ticks) = runs[i];
        match runs[i + 1..].iter().position(|&(_, n)| n == ticks) {
            Some(k) => {
                let (close, _) = runs[i + 1 + k];
                kept.push_str(&line[from..open]);
                from = close + ticks;
                i += k + 2;
            }
            None => i += 1,
        }
    }
    kept.push_str(&line[from..]);
    kept
}

/// Each maximal run of backticks in the line: its byte offset and its length.
fn backtick_runs(line: &str) -> Vec<(usize, usize)> {
    let bytes = line.as_bytes();
    let mut runs = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'`' {
            let len = bytes[at..].iter().take_while(|b| **b == b'`').count();
            runs.push((at, len));
            at += len;
        } else {
            at += 1;
        }
    }
    runs
}

/// The anchors GitHub renders for the page's headings: the heading's text without code-span
/// backticks, lowercased, with every character but letters, digits, `-`, `_` and spaces
/// dropped and spaces turned into `-`; a repeated anchor gets `-1`, `-2`, ….
pub fn anchors(page: &str) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for heading in headings(page) {
        let slug: String = heading
            .text
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let repeats = seen.iter().filter(|s| s.as_str() == slug || is_numbered(s, &slug)).count();
        seen.push(if repeats == 0 { slug } else { format!("{slug}-{repeats}") });
    }
    seen
}

fn is_numbered(anchor: &str, slug: &str) -> bool {
    anchor.strip_prefix(slug).and_then(|n| n.strip_prefix('-')).is_some_and(|n| n.parse::<u32>().is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_in_code_are_not_links() {
        let page = "See [a](a.md) and [`b`](b.md#x).\n`[c](c.md)` and ``[d](d.md)`` stay code.\n\
                    ```text\n[e](e.md)\n```\n| ```` ```rust ```` | [f](f.md) |\n";
        assert_eq!(link_targets(page), vec!["a.md", "b.md#x", "f.md"]);
    }

    #[test]
    fn anchors_are_githubs() {
        let page = "# The CLI: one run per period, like flock(1) across hosts\n\
                    ## When the lock service is down: `--on-unavailable fail|skip|run`\n\
                    ## `INFO fencedlock`\n## The Node.js client\n## Tests\n## Tests\n";
        assert_eq!(
            anchors(page),
            vec![
                "the-cli-one-run-per-period-like-flock1-across-hosts",
                "when-the-lock-service-is-down---on-unavailable-failskiprun",
                "info-fencedlock",
                "the-nodejs-client",
                "tests",
                "tests-1",
            ]
        );
    }
}
