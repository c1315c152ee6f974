//! Redlock and fenced Redlock across five (or three) real masters with some of them stopped
//! (SIGSTOP), killed, or slower than the lease.

use std::time::{Duration, Instant};

use crate::support::{calls, config, nodes};
use fencedlock::{Error, Fencing, LockConfig, Redlock, Token, TokenFormat, Vote};
use fencedlock_protocol::command::{ACQUIRE, RAISE, RELEASE};
use harness::{wait_released, Server};

fn redlock(servers: &[Server], config: LockConfig) -> Redlock {
    Redlock::new(nodes(servers), config).expect("redlock")
}

fn all(servers: &[Server]) -> Vec<&Server> {
    servers.iter().collect()
}

/// Opens every node's connection, so that requests to a node stopped afterwards are queued
/// in its socket (and run, in order, when it resumes) instead of stalling in the handshake.
async fn warm_up(redlock: &Redlock) {
    let lease = redlock.try_acquire("warm-up").await.expect("all nodes up");
    assert!(lease.release().await.unwrap());
}

fn not_awaited(v: &Vote) -> bool {
    matches!(v, Vote::NotAwaited)
}

/// Grants `key` to `token` on every server directly, as if an earlier round had reached
/// them all (a round that ends at a majority need not), so a test knows who holds it.
fn grant_everywhere<'a>(
    servers: impl IntoIterator<Item = &'a Server>,
    key: &str,
    token: &Token,
    ttl_ms: u64,
) {
    let ttl = ttl_ms.to_string();
    for s in servers {
        let args: [&[u8]; 4] = [ACQUIRE.name.as_bytes(), key.as_bytes(), token.as_bytes(), ttl.as_bytes()];
        let fence: Option<u64> = s.cmd(&args).unwrap();
        assert!(fence.is_some(), "{} refused", s.addr());
    }
}

/// Waits (bounded) until every server in `servers` holds `key`.
async fn wait_held(servers: &[&Server], key: &str) {
    let deadline = Instant::now() + Duration::from_secs(3);
    while !servers.iter().all(|s| s.lock_held(key)) {
        assert!(Instant::now() < deadline, "{key:?} never became held on all of {servers:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_masters_grant_raise_and_release() {
    let servers = Server::start_many(5);
    let redlock = redlock(&servers, config(5_000, 300));
    assert_eq!(redlock.quorum(), 3);
    assert_eq!(redlock.fencing(), Fencing::Raise);
    warm_up(&redlock).await;

    let lease = redlock.try_acquire("r").await.expect("grant");
    let report = lease.report();
    // The round ends at the third grant; the others may or may not have been in by then.
    assert!(report.yes() >= 3, "{report}");
    assert!(report.raised() >= 3, "{report}");
    assert_eq!(Some(lease.fence()), report.max_fence());
    for (s, v) in servers.iter().zip(&report.votes) {
        match (&v.vote, &v.raise) {
            (Vote::Granted { .. }, Some(Vote::Granted { .. } | Vote::Confirmed)) => {
                let st = s.lock_status("r").expect("lock state");
                assert!(st.held);
                assert!(st.fence >= lease.fence(), "a confirming node was raised to the lease's fence");
            }
            // A RAISE not waited for; none sent (a majority granted the maximum itself); or no
            // grant waited for.
            (Vote::Granted { .. }, Some(Vote::NotAwaited) | None) | (Vote::NotAwaited, None) => {}
            other => panic!("unexpected vote {other:?} in {report}"),
        }
    }
    assert!(lease.remaining() > Duration::from_secs(4));

    let rival = redlock.clone();
    match rival.try_acquire("r").await {
        Err(Error::QuorumNotReached(rival_report)) => {
            assert!(rival_report.majority_refused(), "{rival_report}");
            // Every node that granted us refuses the rival. (A node whose ACQUIRE the round
            // did not wait for may never have received it, and may grant the rival; that
            // grant was released again by the rival's failed round.)
            for (ours, theirs) in report.votes.iter().zip(&rival_report.votes) {
                if ours.vote.is_yes() {
                    assert!(matches!(theirs.vote, Vote::Refused | Vote::NotAwaited), "{rival_report}");
                }
            }
        }
        other => panic!("expected QuorumNotReached, got {other:?}"),
    }
    let fence = lease.fence();
    assert!(lease.release().await.unwrap());
    wait_released(&all(&servers), "r", Duration::from_secs(2)).await;
    let next = redlock.try_acquire("r").await.unwrap();
    assert!(next.fence() > fence);
    next.release().await.unwrap();
}

/// Acquires "stall" with masters 1 and 3 stopped and a long node timeout; returns the lease
/// (resuming the masters first if there is none).
async fn grant_with_two_stopped(servers: &[Server], redlock: &Redlock) -> (fencedlock::Lease, Duration) {
    warm_up(redlock).await;
    servers[1].pause();
    servers[3].pause();
    let started = Instant::now();
    let result = redlock.try_acquire("stall").await;
    let took = started.elapsed();
    match result {
        Ok(lease) => (lease, took),
        Err(e) => {
            servers[1].resume();
            servers[3].resume();
            panic!("expected a grant from 3 of 5, got {e}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stopped_masters_do_not_delay_a_grant() {
    let servers = Server::start_many(5);
    let node_timeout = Duration::from_secs(2);
    let redlock = redlock(&servers, config(10_000, 2_000));
    let (lease, took) = grant_with_two_stopped(&servers, &redlock).await;
    let report = lease.report().clone();
    servers[1].resume();
    servers[3].resume();
    // Decided by the third grant: the stopped masters were not waited for.
    assert!(took < Duration::from_secs(1), "a majority answered at once, yet it took {took:?}");
    assert!(took < node_timeout);
    assert_eq!(report.yes(), 3, "{report}");
    assert!(not_awaited(&report.votes[1].vote) && not_awaited(&report.votes[3].vote), "{report}");
    assert_eq!(report.raised(), 3, "the raise went to the three granting masters: {report}");
    assert!(report.elapsed < Duration::from_secs(1), "{report}");
    // Validity is still measured from before the first request.
    assert!(lease.remaining() <= Duration::from_millis(10_000) - report.elapsed);
    assert!(lease.remaining() > Duration::from_secs(8), "{:?}", lease.remaining());
    // The release goes to every master; whatever the resumed masters did with the ACQUIRE
    // they may have had queued, nothing is left.
    assert!(lease.release().await.unwrap());
    wait_released(&all(&servers), "stall", Duration::from_secs(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_grant_on_a_master_not_waited_for_is_released_with_the_lease() {
    let servers = Server::start_many(5);
    let redlock = redlock(&servers, config(10_000, 2_000));
    warm_up(&redlock).await;
    // Masters 1 and 3 stopped; master 4 stopped for 800 ms only, so the round (which needs
    // it for a majority) lasts long enough that the ACQUIREs for 1 and 3 are surely written
    // to their sockets before it ends without them (300 ms was not always enough on a
    // machine loaded by the rest of the suite).
    for i in [1, 3, 4] {
        servers[i].pause();
    }
    let resume_4 = async {
        tokio::time::sleep(Duration::from_millis(800)).await;
        servers[4].resume();
    };
    let started = Instant::now();
    let (result, ()) = tokio::join!(redlock.try_acquire("late"), resume_4);
    let took = started.elapsed();
    servers[1].resume();
    servers[3].resume();
    let lease = result.expect("granted by 0, 2 and the resumed 4");
    let report = lease.report().clone();
    // Below the 2 s node timeout: the stopped masters were not waited for.
    assert!(took < Duration::from_millis(1_600), "the stopped masters were not waited for: {took:?}");
    assert!(report.votes[4].vote.is_yes(), "{report}");
    assert!(not_awaited(&report.votes[1].vote) && not_awaited(&report.votes[3].vote), "{report}");
    // Resumed, masters 1 and 3 run the queued ACQUIRE: late grants to our token. A request
    // the round dropped may never have been written (on a loaded machine the round can end
    // first); then the late grant is made here, as the queued ACQUIRE would have made it, so
    // the release is always tested against two late grants.
    let landed = tokio::time::timeout(Duration::from_secs(1), wait_held(&[&servers[1], &servers[3]], "late"))
        .await
        .is_ok();
    if !landed {
        // (A master that got ours meanwhile re-enters: same token.)
        grant_everywhere([&servers[1], &servers[3]], "late", lease.token(), 10_000);
    }
    eprintln!(
        "the dropped ACQUIREs {} on the resumed masters",
        if landed { "landed" } else { "never arrived" }
    );
    wait_held(&[&servers[1], &servers[3]], "late").await;
    // The release goes to every master, so the late grants are cleaned up too.
    assert!(lease.release().await.unwrap());
    wait_released(&all(&servers), "late", Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_released_while_masters_are_stopped_leaves_nothing_when_they_resume() {
    let servers = Server::start_many(5);
    let redlock = redlock(&servers, config(10_000, 300));
    let (lease, _took) = grant_with_two_stopped(&servers, &redlock).await;
    assert_eq!(lease.report().yes(), 3);
    // The stopped masters time out on the RELEASE; the other three confirm it.
    let released = lease.release().await;
    servers[1].resume();
    servers[3].resume();
    assert!(released.unwrap(), "3 of 5 confirmed the release");
    // The stopped masters run the queued ACQUIRE and then the queued RELEASE.
    wait_released(&all(&servers), "stall", Duration::from_secs(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_killed_masters_still_grant_and_renew() {
    let mut servers = Server::start_many(5);
    let redlock = redlock(&servers, config(5_000, 300));
    servers[0].kill9();
    servers[4].kill9();
    let mut lease = redlock.try_acquire("dead2").await.expect("grant from 3 of 5");
    let report = lease.report();
    // A refused connection is usually in before the third grant, but need not be.
    for i in [0, 4] {
        assert!(matches!(report.votes[i].vote, Vote::Failed { .. } | Vote::NotAwaited), "{report}");
    }
    assert_eq!(report.yes(), 3);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = lease.valid_until();
    lease.renew().await.expect("quorum renew with 3 of 5");
    assert!(lease.valid_until() > before);
    assert!(lease.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_killed_masters_grant_nothing_and_leave_nothing() {
    let mut servers = Server::start_many(5);
    let redlock = Redlock::new(
        nodes(&servers),
        LockConfig::builder()
            .ttl(Duration::from_secs(10))
            .node_timeout(Duration::from_millis(300))
            .max_wait(Duration::from_millis(400))
            .backoff(Duration::from_millis(10), Duration::from_millis(50))
            .build()
            .unwrap(),
    )
    .unwrap();
    // Open connections, so that the live nodes get the ACQUIRE even if the three failures
    // decide the round before they answer.
    warm_up(&redlock).await;
    for i in [0, 2, 4] {
        servers[i].kill9();
    }
    match redlock.try_acquire("dead3").await {
        Err(Error::QuorumNotReached(report)) => {
            // The three failures decide the round, whether or not the two grants are in.
            let failed = report.votes.iter().filter(|v| matches!(v.vote, Vote::Failed { .. })).count();
            assert_eq!(failed, 3, "{report}");
            assert!(report.yes() <= 2, "{report}");
            assert!(!report.majority_refused(), "unreachable is not a refusal");
        }
        other => panic!("expected QuorumNotReached, got {other:?}"),
    }
    let started = Instant::now();
    let err = redlock.acquire("dead3").await.unwrap_err();
    assert!(matches!(err, Error::QuorumNotReached(_)), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(3), "acquire gives up after max wait");
    // The dead nodes decided the round; the live ones' releases may still be on their way.
    wait_released(&[&servers[1], &servers[3]], "dead3", Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_stopped_masters_grant_nothing_and_leave_nothing() {
    let servers = Server::start_many(5);
    let redlock = redlock(&servers, config(10_000, 250));
    warm_up(&redlock).await;
    for i in [0, 1, 2] {
        servers[i].pause();
    }
    let result = redlock.try_acquire("stalled3").await;
    // The live nodes were released before try_acquire returned.
    let live_held: Vec<bool> = [3, 4].iter().map(|&i| servers[i].lock_held("stalled3")).collect();
    for i in [0, 1, 2] {
        servers[i].resume();
    }
    match result {
        Err(Error::QuorumNotReached(report)) => assert_eq!(report.yes(), 2, "{report}"),
        other => panic!("expected QuorumNotReached, got {other:?}"),
    }
    assert_eq!(live_held, vec![false, false]);
    wait_released(&all(&servers), "stalled3", Duration::from_secs(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_slower_than_the_ttl_gets_no_lease() {
    let servers = Server::start_many(5);
    // Three stopped masters keep the round open until they resume after 250 ms, longer than
    // the 150 ms lease: the majority's grants are worthless by the time the round is decided.
    let redlock = redlock(&servers, config(150, 2_000));
    warm_up(&redlock).await;
    for i in [0, 1, 2] {
        servers[i].pause();
    }
    let resume_later = async {
        tokio::time::sleep(Duration::from_millis(250)).await;
        for i in [0, 1, 2] {
            servers[i].resume();
        }
    };
    let (result, ()) = tokio::join!(redlock.try_acquire("slow"), resume_later);
    let held_after: Vec<bool> = servers.iter().map(|s| s.lock_held("slow")).collect();
    match result {
        Err(Error::QuorumNotReached(report)) => {
            assert!(report.yes() >= 3, "a majority did grant, late: {report}");
            assert!(report.validity.is_none(), "{report}");
            assert!(report.elapsed >= Duration::from_millis(250), "{report}");
            assert!(report.to_string().contains("validity exhausted"), "{report}");
        }
        other => panic!("expected no grant, got {other:?}"),
    }
    assert_eq!(held_after, vec![false; 5], "released everywhere before returning");
    wait_released(&all(&servers), "slow", Duration::from_secs(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_acquire_mid_flight_leaves_no_lease_anywhere() {
    let servers = Server::start_many(5);
    // Polling rounds (no waiting on the server), so the acquire is surely in a round when it
    // is dropped; dropping one that waits is in `redlock_waiting`.
    let polling = LockConfig::builder()
        .ttl(Duration::from_secs(10))
        .node_timeout(Duration::from_secs(2))
        .max_wait(Duration::from_secs(5))
        .max_blocking(0)
        .build()
        .unwrap();
    let redlock = redlock(&servers, polling);
    warm_up(&redlock).await;
    // With three stopped, two grants cannot decide the round: it waits for the stopped ones.
    for i in [0, 1, 2] {
        servers[i].pause();
    }

    // Abort a spawned acquire while it waits for the stopped nodes.
    let task = {
        let redlock = redlock.clone();
        tokio::spawn(async move { redlock.acquire("cancel").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let granted_meanwhile: Vec<bool> = (3..5).map(|i| servers[i].lock_held("cancel")).collect();
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert_eq!(granted_meanwhile, vec![true, true], "the round was in flight");
    let live: Vec<&Server> = servers[3..].iter().collect();
    wait_released(&live, "cancel", Duration::from_secs(2)).await;

    // Drop the future through a timeout as well.
    let dropped = tokio::time::timeout(Duration::from_millis(300), redlock.acquire("cancel2")).await;
    assert!(dropped.is_err(), "the round cannot finish while three nodes are stopped");
    wait_released(&live, "cancel2", Duration::from_secs(2)).await;

    for i in [0, 1, 2] {
        servers[i].resume();
    }
    wait_released(&all(&servers), "cancel", Duration::from_secs(3)).await;
    wait_released(&all(&servers), "cancel2", Duration::from_secs(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_renew_survives_a_minority_and_not_a_majority() {
    let servers = Server::start_many(5);
    let redlock = redlock(&servers, config(5_000, 300));
    // Held on all five (a round ends at three grants, so a lease need not reach all).
    let token = Token::generate(TokenFormat::Hex);
    grant_everywhere(&servers, "renew", &token, 5_000);
    let mut lease = redlock.try_acquire_with_token("renew", &token).await.unwrap();
    for i in [0, 1] {
        let _: i64 = servers[i].cmd(&["DEL", "renew"]).unwrap();
    }
    lease.renew().await.expect("3 of 5 still hold it");
    let _: i64 = servers[2].cmd(&["DEL", "renew"]).unwrap();
    match lease.renew().await {
        Err(Error::LeaseLost { .. }) => {}
        other => panic!("expected LeaseLost with 3 of 5 gone, got {other:?}"),
    }
    assert!(lease.ensure_valid().is_err());
    assert!(!lease.release().await.unwrap(), "only 2 of 5 still held it");
    wait_released(&all(&servers), "renew", Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_token_needs_a_majority() {
    let servers = Server::start_many(5);
    let redlock = redlock(&servers, config(5_000, 300));
    warm_up(&redlock).await;
    // A lease another process took on all five masters; we only know its token.
    let token = Token::generate(TokenFormat::Hex);
    grant_everywhere(&servers, "handed", &token, 5_000);
    assert!(redlock.renew_token("handed", &token).await.unwrap());

    // Three stopped: nobody can say whether a majority holds it.
    for i in [0, 1, 2] {
        servers[i].pause();
    }
    let unknown = redlock.renew_token("handed", &token).await;
    for i in [0, 1, 2] {
        servers[i].resume();
    }
    match unknown {
        Err(Error::QuorumNotReached(report)) => {
            assert_eq!(report.yes(), 2, "{report}");
            assert!(!report.majority_refused(), "{report}");
        }
        other => panic!("expected QuorumNotReached, got {other:?}"),
    }

    for i in [0, 1] {
        let _: i64 = servers[i].cmd(&["DEL", "handed"]).unwrap();
    }
    assert!(redlock.renew_token("handed", &token).await.unwrap(), "3 of 5 still hold it");
    let _: i64 = servers[2].cmd(&["DEL", "handed"]).unwrap();
    assert!(!redlock.renew_token("handed", &token).await.unwrap(), "3 of 5 lost it");
    assert!(!redlock.release_token("handed", &token).await.unwrap());
    wait_released(&all(&servers), "handed", Duration::from_secs(2)).await;
}

/// Grants G1 from {A, B} (C stopped) after A issued ten fences for the key, then G2 from
/// {B, C} (A stopped). Returns both leases' fences.
async fn two_grants_from_different_majorities(fencing: Fencing) -> (u64, u64) {
    let servers = Server::start_many(3);
    let (a, _b, c) = (&servers[0], &servers[1], &servers[2]);
    for i in 0..10 {
        let token = format!("pump{i}");
        let fence: Option<u64> = a.cmd(&[ACQUIRE.name, "acct", &token, "60000"]).unwrap();
        assert!(fence.is_some());
        let _: i64 = a.cmd(&[RELEASE.name, "acct", &token]).unwrap();
    }
    let redlock = Redlock::with_fencing(nodes(&servers), config(5_000, 200), fencing).unwrap();

    c.pause();
    let g1 = redlock.try_acquire("acct").await;
    c.resume();
    let g1 = g1.expect("G1 from A and B");
    let f1 = g1.fence();
    assert!(g1.release().await.unwrap());
    wait_released(&all(&servers), "acct", Duration::from_secs(3)).await;

    a.pause();
    let g2 = redlock.try_acquire("acct").await;
    let g2 = match g2 {
        Ok(g2) => g2,
        Err(e) => {
            a.resume();
            panic!("G2 from B and C: {e}");
        }
    };
    let f2 = g2.fence();
    let released = g2.release().await;
    a.resume();
    assert!(released.unwrap());
    (f1, f2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_quorum_max_fences_go_backwards_across_majorities() {
    let (f1, f2) = two_grants_from_different_majorities(Fencing::QuorumMax).await;
    assert!(f2 <= f1, "the anomaly: a later grant carries fence {f2} after {f1}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_redlock_fences_increase_across_majorities() {
    let (f1, f2) = two_grants_from_different_majorities(Fencing::Raise).await;
    assert!(f1 >= 11, "G1 carries A's fence: {f1}");
    assert!(f2 > f1, "the raise step makes G2's fence {f2} exceed G1's {f1}");
}

/// RAISEs each server has run.
fn raises(servers: &[Server]) -> Vec<u64> {
    servers.iter().map(|s| calls(s, RAISE.name)).collect()
}

/// Sets `key`'s fence on `s` to `fence`, by a lease taken, raised and released there directly.
fn set_fence(s: &Server, key: &str, fence: u64) {
    let token = Token::generate(TokenFormat::Hex);
    grant_everywhere([s], key, &token, 60_000);
    let fence = fence.to_string();
    let args: [&[u8]; 4] = [RAISE.name.as_bytes(), key.as_bytes(), token.as_bytes(), fence.as_bytes()];
    let raised: Option<u64> = s.cmd(&args).expect("RAISE");
    assert_eq!(raised.map(|f| f.to_string()), Some(fence), "{}", s.addr());
    let args: [&[u8]; 3] = [RELEASE.name.as_bytes(), key.as_bytes(), token.as_bytes()];
    let released: i64 = s.cmd(&args).expect("RELEASE");
    assert_eq!(released, 1, "{}", s.addr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_nodes_below_the_quorums_fence_are_raised() {
    let servers = Server::start_many(3);
    // The third master's fence for the key far above every fence the others issued: it alone
    // grants the maximum.
    let token = Token::generate(TokenFormat::Hex);
    grant_everywhere(&servers, "agree", &token, 60_000);
    let high = servers.iter().filter_map(|s| s.lock_status("agree").map(|st| st.fence)).max().unwrap_or(0);
    for s in &servers {
        let args: [&[u8]; 3] = [RELEASE.name.as_bytes(), b"agree", token.as_bytes()];
        let _: i64 = s.cmd(&args).expect("RELEASE");
    }
    set_fence(&servers[2], "agree", high + 1_000);
    // The first master refuses (another holder), so the majority must include the third.
    let other = Token::generate(TokenFormat::Hex);
    grant_everywhere([&servers[0]], "agree", &other, 60_000);
    let redlock = redlock(&servers, config(5_000, 500));
    let before = raises(&servers);

    let lease = redlock.try_acquire("agree").await.expect("grant");
    let report = lease.report().clone();
    let args: [&[u8]; 3] = [RELEASE.name.as_bytes(), b"agree", other.as_bytes()];
    let _: i64 = servers[0].cmd(&args).expect("RELEASE");
    assert_eq!(lease.fence(), high + 1_001, "{report}");
    assert_eq!(
        raises(&servers)[2],
        before[2],
        "no RAISE to the node whose grant carried the fence: {report}"
    );
    assert!(matches!(report.votes[2].raise, Some(Vote::Confirmed)), "{report}");
    assert!(report.raised() >= 2, "{report}");
    for v in &report.votes {
        if let Some(Vote::Granted { fence }) = v.raise {
            assert_eq!(fence, lease.fence(), "{report}");
        }
    }
    let at_the_fence =
        servers.iter().filter(|s| s.lock_status("agree").map(|st| st.fence) == Some(lease.fence()));
    assert!(at_the_fence.count() >= 2, "a majority holds the lease's fence: {report}");
    let fence = lease.fence() + 10;
    assert!(lease.release().await.unwrap());
    wait_released(&all(&servers), "agree", Duration::from_secs(3)).await;

    // Every node at the same fence: the next lease's grants agree, and no RAISE is sent.
    for s in &servers {
        set_fence(s, "agree", fence);
    }
    let before = raises(&servers);
    let next = redlock.try_acquire("agree").await.expect("grant");
    let report = next.report().clone();
    assert_eq!(next.fence(), fence + 1, "{report}");
    assert_eq!(raises(&servers), before, "grants that agree need no raise: {report}");
    assert!(report.raised() >= 2, "{report}");
    assert!(next.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_round_with_the_same_token_gets_the_same_fence() {
    let servers = Server::start_many(5);
    let redlock = redlock(&servers, config(5_000, 300));
    warm_up(&redlock).await;
    let first = redlock.try_acquire("retry").await.unwrap();
    let fence = first.fence();
    let first_report = first.report().clone();
    let token = first.detach();
    let before: Vec<Option<u64>> =
        servers.iter().map(|s| s.lock_status("retry").map(|st| st.fence)).collect();
    // As if the replies of the first round were lost and the round ran again.
    let again = redlock.try_acquire_with_token("retry", &token).await.expect("idempotent");
    assert_eq!(again.fence(), fence);
    let report = again.report();
    assert!(report.yes() >= 3, "{report}");
    // Every node that held the first grant answers the retry with the fence it had. The
    // retry's raise step may then lift that node to the lease's fence (when the first round's
    // raise to it was not awaited and so never sent), never to a fence of its own.
    let mut both = 0;
    for (i, s) in servers.iter().enumerate() {
        if let (Vote::Granted { .. }, Vote::Granted { fence: granted }) =
            (&first_report.votes[i].vote, &report.votes[i].vote)
        {
            assert_eq!(Some(*granted), before[i], "{} issued a new fence: {report}", s.addr());
            let now = s.lock_status("retry").map(|st| st.fence);
            assert!(
                now == Some(*granted) || now == Some(fence),
                "{}: fence {now:?} after the retry: {report}",
                s.addr()
            );
            both += 1;
        }
    }
    assert!(both >= 1, "two majorities of five share a node");
    assert!(again.release().await.unwrap());
}
