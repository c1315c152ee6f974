//! The manual's redis-cli sessions, typed into a real `redis-cli`: the command reference's "A
//! session with redis-cli" (`docs/commands.md`) at a human's pace, each command line of its
//! blocks a few seconds after the previous one, and the front page's short one (`README.md`).
//! The replies must be the ones the page shows. Only what varies between runs is compared by
//! shape: the ms left in `STATUS` (annotated "ms left"), and redis-cli's `(6.84s)` timing line,
//! which it prints only to a terminal (the test checks instead that the blocked call returned
//! only after the release). An `INFO` reply ending in `...` must contain the lines shown, in
//! that order.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use harness::docs::{page, section, FRONT_PAGE};
use harness::{redis_cli, Server};

/// The pause between two typed lines: the issue's "a few seconds" of a human at a keyboard.
const TYPING_PAUSE: Duration = Duration::from_millis(2_500);
/// Slack added to a narrated pause ("more than 20 s"), for the lease to be gone for sure.
const NARRATED_SLACK: Duration = Duration::from_secs(1);
/// The longest a blocked call may take to answer after the line that releases it.
const BLOCKED_ANSWER_LIMIT: Duration = Duration::from_secs(10);
/// Where the whole session is, and where the front page's short one is.
const REFERENCE_PAGE: &str = "docs/commands.md";
const REFERENCE_SECTION: &str = "## A session with redis-cli";
const FRONT_SECTION: &str = "### redis-cli";
/// An annotation after a reply: two or more spaces, then `#`.
const ANNOTATION: &str = "  #";

/// One line of the session as the page shows it.
#[derive(Debug, Clone, PartialEq)]
enum Line {
    /// A command typed after the prompt, with the reply lines shown under it (empty: the
    /// command blocks, and its reply is the next block without a prompt).
    Command { words: Vec<String>, reply: Vec<Expected> },
    /// Narration such as "... A pauses for more than 20 s ...": wait that long from the
    /// session's first command.
    Pause(Duration),
    /// A block with no prompt: the reply of the blocked command.
    BlockedReply(Vec<Expected>),
}

#[derive(Debug, Clone, PartialEq)]
enum Expected {
    Exact(String),
    /// `N) (integer) MS` whose value varies: a positive integer of at most the ttl.
    MsLeft {
        prefix: String,
    },
    /// redis-cli's elapsed-time line, shown only on a terminal.
    Timing,
    /// `...`: the reply goes on with lines not shown.
    More,
}

/// The ```text blocks of a section's body, line by line.
fn section_blocks(body: &str) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    for line in body.lines() {
        match (&mut current, line.trim_start().starts_with("```")) {
            (None, true) if line.trim() == "```text" => current = Some(Vec::new()),
            (Some(_), true) => blocks.extend(current.take()),
            (Some(lines), false) => lines.push(line.to_string()),
            _ => {}
        }
    }
    blocks
}

fn strip_annotation(line: &str) -> (&str, &str) {
    match line.find(ANNOTATION) {
        Some(at) => (line[..at].trim_end(), line[at + ANNOTATION.len()..].trim()),
        None => (line.trim_end(), ""),
    }
}

fn expected(line: &str) -> Option<Expected> {
    let (shown, note) = strip_annotation(line);
    let shown = shown.trim_start_matches(' ');
    if shown.is_empty() {
        return None;
    }
    if shown == "..." {
        return Some(Expected::More);
    }
    if shown.starts_with('(') && shown.ends_with("s)") && shown[1..shown.len() - 2].parse::<f64>().is_ok() {
        return Some(Expected::Timing);
    }
    if note.contains("ms left") {
        let prefix = shown.rsplit_once(' ').map(|(p, _)| p.to_string()).expect("N) (integer) MS");
        return Some(Expected::MsLeft { prefix });
    }
    Some(Expected::Exact(shown.to_string()))
}

/// "... pauses for more than 20 s ..." gives 20 s.
fn narrated_pause(text: &str) -> Option<Duration> {
    let after = text.split("more than ").nth(1)?;
    let secs: u64 = after.split(' ').next()?.parse().ok()?;
    Some(Duration::from_secs(secs))
}

fn parse(section: &str) -> Vec<Line> {
    let mut session = Vec::new();
    for block in section_blocks(section) {
        let has_prompt = block.iter().any(|l| l.contains("> "));
        if !has_prompt {
            session.push(Line::BlockedReply(block.iter().filter_map(|l| expected(l)).collect()));
            continue;
        }
        for line in &block {
            if let Some((_, command)) = line.split_once("> ") {
                let words = command.split_whitespace().map(str::to_string).collect();
                session.push(Line::Command { words, reply: Vec::new() });
            } else if let Some(pause) = line.trim_start().strip_prefix("...").and_then(narrated_pause) {
                session.push(Line::Pause(pause));
            } else if let (Some(e), Some(Line::Command { reply, .. })) = (expected(line), session.last_mut())
            {
                reply.push(e);
            }
        }
    }
    session
}

fn cli(s: &Server, words: &[String]) -> Command {
    let mut cmd = Command::new(redis_cli());
    cmd.args(["-h", "127.0.0.1", "-p", &s.port().to_string(), "--no-raw"]).args(words);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd
}

fn reply_lines(out: &Output) -> Vec<String> {
    assert!(out.status.success(), "redis-cli failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(|l| l.trim_end_matches('\r').to_string()).collect()
}

/// Whether `actual` is the reply `expected` shows; `None` if so, else what differs.
fn mismatch(expected: &[Expected], actual: &[String], ttl_ms: u64) -> Option<String> {
    let shown: Vec<&Expected> = expected.iter().filter(|e| **e != Expected::Timing).collect();
    let open_ended = shown.last() == Some(&&Expected::More);
    let shown = if open_ended { &shown[..shown.len() - 1] } else { &shown[..] };
    let matches = |e: &Expected, a: &str| match e {
        Expected::Exact(text) => a == text,
        Expected::MsLeft { prefix } => a
            .strip_prefix(prefix.as_str())
            .and_then(|ms| ms.trim().parse::<u64>().ok())
            .is_some_and(|ms| ms > 0 && ms <= ttl_ms),
        Expected::Timing | Expected::More => true,
    };
    if open_ended {
        // The lines shown, in order, among those of the reply.
        let mut rest = actual.iter();
        let missing = shown.iter().find(|e| !rest.any(|a| matches(e, a)));
        return missing.map(|e| format!("{e:?} not found in order"));
    }
    let same = shown.len() == actual.len() && shown.iter().zip(actual).all(|(e, a)| matches(e, a));
    (!same).then(|| format!("{} lines expected, {} got", shown.len(), actual.len()))
}

/// The ttl argument of an ACQUIRE/RENEW line (the third word after the command), else 0.
fn ttl_of(words: &[String]) -> u64 {
    words.get(3).and_then(|w| w.parse().ok()).unwrap_or(0)
}

#[test]
fn the_reference_session_typed_at_human_speed_gets_the_replies_shown() {
    let session = parse(&section(&page(REFERENCE_PAGE), REFERENCE_SECTION));
    let commands = session.iter().filter(|l| matches!(l, Line::Command { .. })).count();
    assert!(commands >= 10, "the session was not parsed: {session:?}");
    assert!(session.iter().any(|l| matches!(l, Line::Pause(_))), "no narrated pause parsed");
    type_session(&session, TYPING_PAUSE);
}

/// The front page's short session: no narrated pause, so it is typed without one.
#[test]
fn the_front_page_session_gets_the_replies_shown() {
    let session = parse(&section(&page(FRONT_PAGE), FRONT_SECTION));
    let commands = session.iter().filter(|l| matches!(l, Line::Command { .. })).count();
    assert!(commands >= 4, "the session was not parsed: {session:?}");
    type_session(&session, Duration::ZERO);
}

/// Types `session` into `redis-cli` against a fresh server, `typing_pause` between two
/// command lines, and panics at the first reply that is not the one shown.
fn type_session(session: &[Line], typing_pause: Duration) {
    let s = Server::start();
    let began = Instant::now();
    let mut last_ttl = 0;
    let mut blocked: Option<(Child, Instant, u64)> = None;
    let mut released_at: Option<Instant> = None;
    for (i, line) in session.iter().enumerate() {
        match line {
            Line::Pause(d) => {
                let until = began + *d + NARRATED_SLACK;
                std::thread::sleep(until.saturating_duration_since(Instant::now()));
            }
            Line::Command { words, reply } => {
                if i > 0 {
                    std::thread::sleep(typing_pause);
                }
                if ttl_of(words) > 0 {
                    last_ttl = ttl_of(words);
                }
                if reply.is_empty() {
                    assert!(blocked.is_none(), "two blocked commands at once");
                    let child = cli(&s, words).spawn().expect("spawn redis-cli");
                    blocked = Some((child, Instant::now(), ttl_of(words)));
                    continue;
                }
                let out = cli(&s, words).output().expect("run redis-cli");
                if blocked.is_some() && released_at.is_none() {
                    released_at = Some(Instant::now());
                }
                let actual = reply_lines(&out);
                if let Some(why) = mismatch(reply, &actual, last_ttl) {
                    panic!("`{}`: {why}\npage: {reply:?}\nserver: {actual:?}", words.join(" "));
                }
            }
            Line::BlockedReply(reply) => {
                let (child, sent, ttl) = blocked.take().expect("a blocked command before its reply");
                let out = child.wait_with_output().expect("wait for the blocked redis-cli");
                let answered = sent.elapsed();
                let released = released_at.take().expect("a command after the blocked one released it");
                assert!(
                    released.duration_since(sent) < answered,
                    "the blocked call answered before the release was typed"
                );
                assert!(released.elapsed() < BLOCKED_ANSWER_LIMIT, "the blocked call answered late");
                let actual = reply_lines(&out);
                if let Some(why) = mismatch(reply, &actual, ttl) {
                    panic!("blocked call: {why}\npage: {reply:?}\nserver: {actual:?}");
                }
            }
        }
    }
    assert!(blocked.is_none(), "a blocked command had no reply on the page");
}

#[test]
fn the_session_parser_reads_commands_pauses_and_varying_lines() {
    let page = concat!(
        "## A session with redis-cli\n```text\n",
        "h:1> FENCEDLOCK.STATUS k\n",
        "1) (integer) 1                 # fence\n",
        "3) (integer) 14412             # ms left\n",
        "   ... A pauses for more than 20 s; its lease expires ...\n",
        "h:1> ACQUIRE k t 20000 BLOCK 60000\n",
        "                               # ... blocked ...\n",
        "```\n\n```text\n(integer) 4   # B\n(6.84s)\n```\n## Next\n```text\nh:1> PING\n```\n",
    );
    let session = parse(&section(page, REFERENCE_SECTION));
    let exact = |s: &str| Expected::Exact(s.to_string());
    assert_eq!(
        session,
        vec![
            Line::Command {
                words: vec!["FENCEDLOCK.STATUS".into(), "k".into()],
                reply: vec![exact("1) (integer) 1"), Expected::MsLeft { prefix: "3) (integer)".into() }],
            },
            Line::Pause(Duration::from_secs(20)),
            Line::Command {
                words: ["ACQUIRE", "k", "t", "20000", "BLOCK", "60000"].map(String::from).to_vec(),
                reply: vec![],
            },
            Line::BlockedReply(vec![exact("(integer) 4"), Expected::Timing]),
        ]
    );
    let info = [exact("# fencedlock"), exact("b:1"), Expected::More];
    let lines = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(mismatch(&info, &lines(&["# fencedlock", "a:0", "b:1", "c:2"]), 0), None);
    assert!(mismatch(&info, &lines(&["# fencedlock", "b:2"]), 0).is_some());
    let status = [Expected::MsLeft { prefix: "3) (integer)".into() }];
    assert_eq!(mismatch(&status, &lines(&["3) (integer) 19990"]), 20_000), None);
    assert!(mismatch(&status, &lines(&["3) (integer) 20001"]), 20_000).is_some());
    assert!(mismatch(&[exact("(integer) 1")], &lines(&["(integer) 1", "x"]), 0).is_some());
}
