//! Lease tokens never appear in the client's errors or reports, even when a server without
//! the module echoes the arguments of the command it does not know (token included), and
//! those errors stay typed (kind, code, retry classification).

use std::time::Duration;

use fencedlock::{
    Cause, Engine, EngineChoice, Error, LockConfig, Locker, Node, Redlock, Token, TokenFormat, Vote,
};
use fencedlock_protocol::command::{ACQUIRE, RELEASE};
use harness::Server;

/// The support crate's config, but on the module only: a server without it must not be
/// served by the Functions library.
fn config(ttl_ms: u64, node_timeout_ms: u64) -> LockConfig {
    LockConfig::builder()
        .ttl(Duration::from_millis(ttl_ms))
        .node_timeout(Duration::from_millis(node_timeout_ms))
        .backoff(Duration::from_millis(5), Duration::from_millis(50))
        .max_wait(Duration::from_secs(5))
        .engine(EngineChoice::Only(Engine::Module))
        .build()
        .expect("valid test config")
}

/// Tokens of every shape a caller may use: hex as the CLI makes them, printable text, text
/// with line breaks (Redis turns them into spaces when it echoes), and raw random bytes.
fn tokens() -> Vec<Token> {
    vec![
        Token::generate(TokenFormat::Hex),
        Token::from_bytes(b"deploy-secret-7f3a9c".to_vec()).unwrap(),
        Token::from_bytes(b"line\r\nbreak-secret".to_vec()).unwrap(),
        Token::generate(TokenFormat::Raw),
    ]
}

/// Every way the token could show up in `shown`.
fn assert_no_token(shown: &str, token: &Token) {
    let text = String::from_utf8_lossy(token.as_bytes()).into_owned();
    for spelling in
        [text.clone(), text.replace(['\r', '\n'], " "), token.to_hex(), token.to_hex().to_uppercase()]
    {
        assert!(!shown.contains(&spelling), "the token {spelling:?} leaked into: {shown}");
    }
    for line in text.split(['\r', '\n']).filter(|l| l.len() >= 4) {
        assert!(!shown.contains(line), "part of the token {line:?} leaked into: {shown}");
    }
}

fn assert_error_hides(err: &Error, token: &Token) {
    assert_no_token(&format!("{err} {err:?}"), token);
}

/// The server's "unknown command" reply, as the client reports it: still an `ERR` with its
/// meaning intact, the token cut out, final (not retryable).
fn assert_unknown_command(err: &Error) {
    match err {
        Error::Server { source, .. } => {
            assert_eq!(source.code(), Some("ERR"), "{err}");
            let detail = source.detail().unwrap_or_default();
            assert!(detail.contains("unknown command"), "{err}");
            assert!(detail.contains("<redacted>"), "{err}");
            assert_eq!(Cause::of(source), Cause::NoModule, "{err}");
        }
        other => panic!("expected a server error, got {other:?}"),
    }
    assert!(!err.is_retryable(), "a missing module is final: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_only_locker_never_sends_a_token_to_a_server_without_the_module() {
    let plain = Server::builder().without_module().start();
    let locker = Locker::new(Node::new(&plain.url()).unwrap(), config(5_000, 1_000)).expect("locker");
    for token in tokens() {
        let attempts = [
            locker.try_acquire_with_token("k", &token).await.map(drop),
            locker.renew_token("k", &token).await.map(drop),
            locker.release_token("k", &token).await.map(drop),
        ];
        for err in attempts.into_iter().map(Result::unwrap_err) {
            assert_error_hides(&err, &token);
            // The client's own error (code NOMODULE), not the server's reply to a lease request
            // (ERR unknown command, which would have carried the token).
            match &err {
                Error::Server { source, .. } => {
                    assert_eq!(source.code(), Some("NOMODULE"), "{err}");
                    assert_eq!(Cause::of(source), Cause::NoModule, "{err}");
                }
                other => panic!("expected the missing module, got {other:?}"),
            }
            assert!(!err.is_retryable(), "a missing module is final: {err}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_lost_its_module_never_shows_the_token() {
    let mut server = Server::start();
    let locker = Locker::new(Node::new(&server.url()).unwrap(), config(5_000, 1_000)).expect("locker");
    assert_eq!(locker.node().detect_engine().await.expect("the module is there"), Engine::Module);
    server.set_restart_without_module();
    server.restart();
    // Printable tokens only: the server echoes a raw token's bytes, which are not UTF-8, and
    // the `redis` crate reports such a reply as a parse error holding none of them.
    for token in tokens().into_iter().filter(|token| std::str::from_utf8(token.as_bytes()).is_ok()) {
        let acquired = locker.try_acquire_with_token("k", &token).await.unwrap_err();
        assert_error_hides(&acquired, &token);
        assert_unknown_command(&acquired);
        let renewed = locker.renew_token("k", &token).await.unwrap_err();
        assert_error_hides(&renewed, &token);
        assert_unknown_command(&renewed);
        let released = locker.release_token("k", &token).await.unwrap_err();
        assert_error_hides(&released, &token);
        assert_unknown_command(&released);
    }
    // The error still names the command the server did not know.
    let token = Token::from_bytes(b"visible-secret".to_vec()).unwrap();
    match locker.try_acquire_with_token("k", &token).await {
        Err(Error::Server { source, .. }) => {
            assert_eq!(source.code(), Some("ERR"));
            assert!(source.to_string().contains(ACQUIRE.name), "{source}");
        }
        other => panic!("expected the server's error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_reports_never_show_the_token() {
    let with_module = Server::start_many(2);
    let plain = [Server::builder().without_module().start(), Server::builder().without_module().start()];
    let one_plain = [plain[0].url(), with_module[0].url(), with_module[1].url()];
    let two_plain = [plain[0].url(), plain[1].url(), with_module[0].url()];
    for token in tokens() {
        // One plain server, one grant, one refusal (a rival holds the key there): the plain
        // server's answer decides the round, so the report holds its error.
        let redlock = Redlock::open(&one_plain, config(5_000, 1_000)).unwrap();
        let rival: Option<u64> = with_module[1].cmd(&[ACQUIRE.name, "r", "rival", "60000"]).unwrap();
        assert!(rival.is_some());
        let err = redlock.try_acquire_with_token("r", &token).await.unwrap_err();
        assert_error_hides(&err, &token);
        let Error::QuorumNotReached(report) = &err else {
            panic!("expected QuorumNotReached, got {err:?}");
        };
        assert!(matches!(report.votes[0].vote, Vote::Failed { .. }), "{report}");
        assert!(matches!(report.votes[2].vote, Vote::Refused), "{report}");
        let _: i64 = with_module[1].cmd(&[RELEASE.name, "r", "rival"]).unwrap();

        // Granted by the two servers with the module; whatever the report holds is clean.
        let lease = redlock.try_acquire_with_token("r", &token).await.expect("2 of 3");
        let report = lease.report().clone();
        assert_no_token(&format!("{report} {report:?} {lease:?}"), &token);
        assert!(lease.release().await.unwrap());

        // Two plain servers: no majority, and no retry can help.
        let redlock = Redlock::open(&two_plain, config(5_000, 1_000)).unwrap();
        let err = redlock.try_acquire_with_token("r", &token).await.unwrap_err();
        assert_error_hides(&err, &token);
        let Error::QuorumNotReached(report) = &err else {
            panic!("expected QuorumNotReached, got {err:?}");
        };
        let failed = report.votes.iter().filter(|v| matches!(v.vote, Vote::Failed { .. })).count();
        assert_eq!(failed, 2, "the two plain servers decided the round: {report}");
        assert!(!err.is_retryable(), "a majority without the module is final: {err}");
        for call in [redlock.renew_token("r", &token).await, redlock.release_token("r", &token).await] {
            let err = call.expect_err("no majority has the module");
            assert_error_hides(&err, &token);
            assert!(matches!(err, Error::QuorumNotReached(_)), "{err:?}");
        }
    }
}
