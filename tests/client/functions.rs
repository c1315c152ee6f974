//! The client on servers without the module: the Functions engine is detected and the library
//! loaded when missing (or run as a script where `FUNCTION` is denied); leases, waiting (woken
//! by releases and expiries, not polling), renewals, releases, semaphores, Redlock, fenced
//! Redlock and replica confirmation work as with the module; fences rise across a deleted lock
//! key; and a server with no engine at all is a configuration error naming the ways out.

use std::time::{Duration, Instant};

use fencedlock::{
    Cause, Engine, EngineChoice, Error, Fencing, Lease, LockConfig, Locker, ReadWriteLock, Redlock,
    Semaphore, Token,
};
use fencedlock_protocol::functions;
use harness::Server;
use tokio::task::JoinHandle;

use crate::support::{calls, config, hand_over, waiter};

fn module_less() -> Server {
    Server::builder().without_module().start()
}

/// The server's library version, `None` without one.
fn library_version(server: &Server) -> Option<u64> {
    server.cmd::<u64>(&["FCALL_RO", functions::VERSION_FUNCTION, "0"]).ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_the_module_gets_the_library_and_serves_leases() {
    let server = module_less();
    assert_eq!(library_version(&server), None, "a fresh server has no library");
    let locker = Locker::open(&server.url(), config(5_000, 500)).expect("locker");
    assert_eq!(locker.engine(), None, "not known before the first request");

    let lease = locker.try_acquire("fn:k").await.expect("granted by the library");
    assert_eq!(locker.engine(), Some(Engine::Functions));
    assert_eq!(library_version(&server), Some(functions::VERSION), "the client loaded it");
    assert!(lease.fence() > 0);
    match locker.try_acquire("fn:k").await {
        Err(Error::Contended { key }) => assert_eq!(key, "fn:k"),
        other => panic!("expected Contended, got {other:?}"),
    }
    let status = locker.node().status("fn:k").await.expect("status").expect("lock state");
    assert!(status.held && status.fence == lease.fence(), "{status:?}");

    // A waiter (woken by the release: a script cannot wait) is granted after it, with a higher fence.
    let waiter = waiter(&locker, "fn:k");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut next = hand_over(lease, waiter).await;
    next.renew().await.expect("renewed");

    // The lock key deleted: the floor keeps the fence from repeating.
    let last = next.fence();
    next.release().await.expect("released");
    let _: i64 = server.cmd(&["DEL", "fn:k"]).expect("DEL");
    let after = locker.try_acquire("fn:k").await.expect("granted");
    assert!(after.fence() > last, "{} after the deleted key's {last}", after.fence());
    after.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_run_on_the_library() {
    let server = module_less();
    let locker = Locker::open(&server.url(), config(5_000, 500)).expect("locker");
    let semaphore = Semaphore::new(locker, "fn:sem", 2).expect("semaphore");
    let a = semaphore.try_acquire().await.expect("first permit");
    let b = semaphore.try_acquire().await.expect("second permit");
    assert!(b.fence() > a.fence());
    assert!(semaphore.try_acquire().await.is_err(), "a third holder is refused");
    a.release().await.expect("released");
    let c = semaphore.try_acquire().await.expect("a freed permit");
    assert!(c.fence() > b.fence());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_locks_run_on_the_library_and_a_waiting_writer_gets_in() {
    let server = module_less();
    let locker = Locker::open(&server.url(), config(5_000, 500)).expect("locker");
    let lock = ReadWriteLock::new(locker, "fn:rw");
    let r1 = lock.try_read().await.expect("a reader");
    let r2 = lock.try_read().await.expect("a second reader");
    assert!(r2.fence() > r1.fence());
    assert!(matches!(lock.try_write().await, Err(fencedlock::Error::Contended { .. })));
    // A writer waits (naming the wake-up list): readers that come later are kept out.
    let writer = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.write().await })
    };
    let marked = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if server.cmd::<Option<String>>(&["HGET", "fn:rw", "writer_until"]).ok().flatten().is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    marked.await.expect("the waiting writer leaves its mark");
    assert!(matches!(lock.try_read().await, Err(fencedlock::Error::Contended { .. })), "no reader passes it");
    let top = r2.fence();
    r1.release().await.expect("release");
    r2.release().await.expect("release");
    let mut w = tokio::time::timeout(Duration::from_secs(5), writer)
        .await
        .expect("in time")
        .expect("task")
        .expect("the writer");
    assert!(w.fence() > top);
    lock.downgrade(&mut w).await.expect("a downgrade on the library");
    let status = lock.status().await.expect("status").expect("state");
    assert!(status.is_shared() && status.holders[0].fence == w.fence(), "{status:?}");
}

/// Readers waiting for a writer on the library each nap on the wake-up list; the writer's
/// release wakes one, and each granted reader passes the wake-up on. Without that, the others
/// would sleep until the writer's lease would have ended (10 s here, past their 5 s wait).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_waiting_for_a_writer_on_the_library_all_enter_when_it_leaves() {
    let server = module_less();
    let locker = Locker::open(&server.url(), config(10_000, 500)).expect("locker");
    let lock = ReadWriteLock::new(locker, "fn:rw:cascade");
    let writer = lock.try_write().await.expect("the writer");
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let lock = lock.clone();
            tokio::spawn(async move { lock.read().await })
        })
        .collect();
    let napping = || {
        let list: String = server.cmd(&["CLIENT", "LIST"]).expect("CLIENT LIST");
        list.matches("cmd=blpop").count()
    };
    let all_napping = tokio::time::timeout(Duration::from_secs(5), async {
        while napping() < 3 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    all_napping.await.expect("the three readers nap on the wake-up list");
    let released = Instant::now();
    assert!(writer.release().await.expect("release"));
    let mut leases = Vec::new();
    for reader in readers {
        let lease =
            tokio::time::timeout(Duration::from_secs(8), reader).await.expect("in time").expect("task");
        leases.push(lease.expect("a read lease"));
    }
    let took = released.elapsed();
    assert!(took < Duration::from_secs(1), "the readers took {took:?} to enter after the writer left");
    assert_eq!(lock.status().await.expect("status").expect("state").holders.len(), 3, "{leases:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_module_is_preferred_where_it_is_loaded_and_either_engine_can_be_forced() {
    let with_module = Server::start();
    let locker = Locker::open(&with_module.url(), config(5_000, 500)).expect("locker");
    let _lease = locker.try_acquire("e:k").await.expect("granted");
    assert_eq!(locker.engine(), Some(Engine::Module));
    assert_eq!(library_version(&with_module), None, "no library loaded beside the module");

    let forced = |choice| {
        let config =
            LockConfig::builder().ttl(Duration::from_secs(5)).engine(choice).build().expect("config");
        Locker::open(&with_module.url(), config).expect("locker")
    };
    let functions = forced(EngineChoice::Only(Engine::Functions));
    let _lease = functions.try_acquire("e:fn").await.expect("granted by the library beside the module");
    assert_eq!(functions.engine(), Some(Engine::Functions));
    let module_view = with_module.cmd::<fencedlock::redis::Value>(&["FENCEDLOCK.STATUS", "e:fn"]);
    assert!(module_view.is_err_and(|e| e.code() == Some("WRONGTYPE")), "the library's key, not the module's");

    let module_less = module_less();
    let config = LockConfig::builder().engine(EngineChoice::Only(Engine::Module)).build().expect("config");
    let module_only = Locker::open(&module_less.url(), config).expect("locker");
    let err = module_only.try_acquire("e:k").await.expect_err("no module there");
    assert!(matches!(&err, Error::Server { source, .. } if Cause::of(source) == Cause::NoModule), "{err}");
    assert!(err.to_string().contains("not loaded"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn neither_engine_is_a_configuration_error_naming_both_ways_out() {
    // A managed service whose default user may not run FUNCTION (nor MODULE, CONFIG, DEBUG),
    // nor load scripts (SCRIPT LOAD: the library as a script).
    let server = Server::builder().deny_functions().start();
    let _: String = server.admin_cmd(&["ACL", "SETUSER", "default", "-script"]).expect("ACL SETUSER");
    let url = server.url();
    let locker = Locker::open(&url, config(5_000, 500)).expect("locker");
    let err = locker.try_acquire("k").await.expect_err("no engine");
    match &err {
        Error::Server { source, .. } => assert_eq!(Cause::of(source), Cause::NoEngine, "{err}"),
        other => panic!("expected a configuration error, got {other:?}"),
    }
    assert!(!err.is_unavailable() && !err.is_retryable(), "{err}");
    let text = err.to_string();
    assert!(text.contains("--loadmodule") && text.contains("FUNCTION LOAD REPLACE"), "{text}");

    // Once an administrator loads the library, the same user runs on it.
    let _: String = server.admin_cmd(&["FUNCTION", "LOAD", "REPLACE", functions::LIBRARY]).expect("loaded");
    let locker = Locker::open(&url, config(5_000, 500)).expect("locker");
    let _lease = locker.try_acquire("k").await.expect("granted by the loaded library");
}

/// Waits until `n` clients are blocked on the server (in `BLPOP` on a wake-up list).
async fn wait_blocked(server: &Server, n: u64) {
    for _ in 0..500 {
        let blocked = server.info_field("clients", "blocked_clients").unwrap_or_default();
        if blocked.parse::<u64>().ok() == Some(n) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{n} clients never blocked on the wake-up list");
}

/// A task acquiring `key` with `locker`, returned once it is blocked on `server`'s wake-up list.
async fn blocked_waiter(
    locker: &Locker,
    server: &Server,
    key: &'static str,
) -> JoinHandle<Result<Lease, Error>> {
    let waiter = waiter(locker, key);
    wait_blocked(server, 1).await;
    waiter
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_woken_by_releases_in_arrival_order_and_by_expiry_without_polling() {
    let server = module_less();
    let locker = Locker::open(&server.url(), config(60_000, 500)).expect("locker");
    // Nobody waits: the release leaves no wake-up list behind.
    let alone = locker.try_acquire("w:k").await.expect("granted");
    alone.release().await.expect("released");
    let wake = functions::wake_key(b"w:k");
    let exists = || server.cmd::<i64>(&[b"EXISTS".to_vec(), wake.clone()]).expect("EXISTS");
    assert_eq!(exists(), 0, "a release with nobody waiting skips the list");
    let holder = locker.try_acquire("w:k").await.expect("granted");

    // Three waiters, each blocked before the next arrives; each releases soon after its grant.
    let (granted, mut grants) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for i in 0..3u64 {
        let (locker, granted) = (locker.clone(), granted.clone());
        tasks.push(tokio::spawn(async move {
            let lease = locker.acquire("w:k").await.expect("granted after the holders before");
            granted.send((i, lease.fence())).expect("the test listens");
            tokio::time::sleep(Duration::from_millis(100)).await;
            lease.release().await.expect("released");
        }));
        wait_blocked(&server, i + 1).await;
    }
    let _: String = server.cmd(&["CONFIG", "RESETSTAT"]).expect("RESETSTAT");
    let mut last = holder.fence();
    holder.release().await.expect("released");
    for expected in 0..3 {
        let (i, fence) = grants.recv().await.expect("a grant");
        assert_eq!(i, expected, "woken in arrival order");
        assert!(fence > last, "{fence} after {last}");
        last = fence;
    }
    for task in tasks {
        task.await.expect("waiter");
    }
    // Four releases and one granted attempt per waiter; polling (every 5-50 ms here) would have
    // asked many times while each waiter held the key for 100 ms.
    let fcalls = calls(&server, "fcall");
    assert!(fcalls <= 10, "{fcalls} FCALLs: the waiters polled instead of being woken");

    // A holder that never releases: the waiter sleeps in BLPOP until the lease's end.
    let short = Locker::open(&server.url(), config(1_000, 500)).expect("locker");
    let expiring = short.try_acquire("w:expiring").await.expect("granted");
    let fence = expiring.fence();
    std::mem::forget(expiring);
    let _: String = server.cmd(&["CONFIG", "RESETSTAT"]).expect("RESETSTAT");
    let next = locker.acquire("w:expiring").await.expect("granted after the expiry");
    assert!(next.fence() > fence);
    let (fcalls, blpops) = (calls(&server, "fcall"), calls(&server, "blpop"));
    // The attempt, the STATUS and the attempt that registers, then the one after the expiry
    // (a nap that ended a hair early would add one more round).
    assert!(fcalls <= 7 && blpops <= 2, "{fcalls} FCALLs, {blpops} BLPOPs over a 1 s lease");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_waits_on_the_designated_node_of_module_less_masters() {
    let servers: Vec<Server> = (0..3).map(|_| module_less()).collect();
    let urls: Vec<String> = servers.iter().map(Server::url).collect();
    let redlock = Redlock::open(&urls, config(60_000, 500)).expect("redlock");
    // Held on every node. (A round ends with a majority and drops its request to the slowest
    // node, often unsent; a designated node the holder does not hold grants reservations that
    // cannot make a majority, and waiters then poll in reservation rounds instead of queueing.)
    let floor = functions::floor_key(b"rl:k");
    for s in &servers {
        let _: String = s.cmd(&["FUNCTION", "LOAD", "REPLACE", functions::LIBRARY]).expect("loaded");
        let fence: Option<u64> = s
            .cmd(&[&b"FCALL"[..], b"fencedlock_acquire", b"2", b"rl:k", &floor, b"holder", b"60000"])
            .expect("acquire");
        assert!(fence.is_some(), "{} refused", s.addr());
    }
    let waiter = tokio::spawn({
        let redlock = redlock.clone();
        async move { redlock.acquire("rl:k").await }
    });
    // The waiter blocks on one node's wake-up list, the same for every contender.
    let blocked = || {
        servers
            .iter()
            .map(|s| s.info_field("clients", "blocked_clients").unwrap_or_default())
            .collect::<Vec<_>>()
    };
    let mut seen = blocked();
    for _ in 0..300 {
        if seen.iter().filter(|b| *b == "1").count() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        seen = blocked();
    }
    assert_eq!(seen.iter().filter(|b| *b == "1").count(), 1, "blocked clients per node: {seen:?}");
    let holder = Token::from_bytes(b"holder".to_vec()).expect("token");
    assert!(redlock.release_token("rl:k", &holder).await.expect("released"));
    let next = waiter.await.expect("task").expect("granted after the release");
    next.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_info_gets_rising_fences_from_the_floor() {
    let server = module_less();
    let _: String = server.cmd(&["FUNCTION", "LOAD", "REPLACE", functions::LIBRARY]).expect("loaded");
    let _: String = server
        .cmd(&["ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all", "-info", "-function"])
        .expect("ACL SETUSER");
    let url = format!("redis://app:pw@127.0.0.1:{}", server.port());
    let locker = Locker::open(&url, config(5_000, 500)).expect("locker");
    let mut last = 0;
    for round in 0..3 {
        let lease = locker.try_acquire("noinfo:k").await.expect("granted without INFO");
        assert!(lease.fence() > last, "round {round}: {} after {last}", lease.fence());
        last = lease.fence();
        lease.release().await.expect("released");
        let _: i64 = server.cmd(&["DEL", "noinfo:k"]).expect("DEL");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_denied_function_runs_the_library_as_a_script() {
    let server = module_less();
    let _: String = server
        .cmd(&["ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all", "-function", "-fcall", "-fcall_ro"])
        .expect("ACL SETUSER");
    let url = format!("redis://app:pw@127.0.0.1:{}", server.port());
    let locker = Locker::open(&url, config(60_000, 500)).expect("locker");
    let first = locker.try_acquire("script:k").await.expect("granted by the script");
    assert_eq!(locker.engine(), Some(Engine::Script));
    assert_eq!(library_version(&server), None, "no library was loaded");

    // Waiting works as on the library: woken by the release, with a higher fence.
    let waiter = blocked_waiter(&locker, &server, "script:k").await;
    let next = hand_over(first, waiter).await;

    // The script cache emptied (as by a restart or a failover): the client loads it again,
    // on the shared connection (RENEW) and on a waiting one alike.
    let _: String = server.cmd(&["SCRIPT", "FLUSH"]).expect("SCRIPT FLUSH");
    let mut next = next;
    next.renew().await.expect("renewed after the flush");
    let waiter = blocked_waiter(&locker, &server, "script:k").await;
    let _: String = server.cmd(&["SCRIPT", "FLUSH"]).expect("SCRIPT FLUSH");
    let last = hand_over(next, waiter).await;

    // The floor holds across a deleted key here too.
    let fence = last.fence();
    last.release().await.expect("released");
    let _: i64 = server.cmd(&["DEL", "script:k"]).expect("DEL");
    let after = locker.try_acquire("script:k").await.expect("granted");
    assert!(after.fence() > fence);
}

/// Not held on this engine (docs/guarantees.md says so): the library keeps its
/// holders in the lock key's hash, so whoever may read the key reads the tokens, while the
/// module's value shows no token to any command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_readable_by_whoever_may_read_the_lock_key() {
    let server = module_less();
    let locker = Locker::open(&server.url(), config(5_000, 500)).expect("locker");
    let lease = locker.try_acquire("secret:k").await.expect("granted");
    let holders: Vec<u8> = server.cmd(&["HGET", "secret:k", "holders"]).expect("HGET");
    let token = lease.token().as_bytes();
    assert!(holders.windows(token.len()).any(|w| w == token), "the token is in the hash");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_confirmed_grants_and_waits_run_on_the_library() {
    let primary = module_less();
    let replica = primary.start_replica();
    let config = |replicas| {
        LockConfig::builder()
            .ttl(Duration::from_secs(10))
            .node_timeout(Duration::from_millis(500))
            .max_wait(Duration::from_secs(5))
            .confirm_replicas(replicas)
            .confirm_timeout(Duration::from_millis(500))
            .build()
            .expect("config")
    };
    let locker = Locker::open(&primary.url(), config(1)).expect("locker");
    let lease = locker.try_acquire("confirm:k").await.expect("confirmed by the replica");
    assert_eq!(locker.engine(), Some(Engine::Functions));
    let seen = replica.cmd::<Option<u64>>(&["HGET", "confirm:k", "fence"]).expect("HGET");
    assert_eq!(seen, Some(lease.fence()), "the replica has the grant");

    // A waiter woken by the release is confirmed too.
    let waiter = blocked_waiter(&locker, &primary, "confirm:k").await;
    let next = hand_over(lease, waiter).await;
    let seen = replica.cmd::<Option<u64>>(&["HGET", "confirm:k", "fence"]).expect("HGET");
    assert_eq!(seen, Some(next.fence()));

    // Two confirmations from one replica cannot be had: refused, and nothing is left held.
    let greedy = Locker::open(&primary.url(), config(2)).expect("locker");
    let err = greedy.try_acquire("confirm:other").await.expect_err("only one replica");
    assert!(matches!(err, Error::NotConfirmed { wanted: 2, confirmed: 1, .. }), "{err:?}");
    let status = locker.node().status("confirm:other").await.expect("status");
    assert!(status.as_ref().is_none_or(|s| !s.held), "{status:?}");
}

/// Fenced Redlock on module-less masters: master A's fence for the key is raised far above the
/// others', G1 is granted by {A, B}, G2 by {B, C}; the raise step carried A's fence to B, so
/// G2's fence is above G1's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_redlock_fences_increase_across_majorities_of_module_less_masters() {
    let servers: Vec<Server> = (0..3).map(|_| module_less()).collect();
    let (a, c) = (&servers[0], &servers[2]);
    let _: String = a.cmd(&["FUNCTION", "LOAD", "REPLACE", functions::LIBRARY]).expect("loaded");
    let floor = functions::floor_key(b"acct");
    let fence: u64 = a
        .cmd(&[&b"FCALL"[..], b"fencedlock_acquire", b"2", b"acct", &floor, b"pump", b"60000"])
        .expect("acquire");
    let high = (fence + (1 << 40)).to_string();
    let raised: u64 = a
        .cmd(&[&b"FCALL"[..], b"fencedlock_raise", b"2", b"acct", &floor, b"pump", high.as_bytes()])
        .expect("raise");
    let released: i64 =
        a.cmd(&[&b"FCALL"[..], b"fencedlock_release", b"2", b"acct", &floor, b"pump"]).expect("release");
    assert_eq!(released, 1);

    let urls: Vec<String> = servers.iter().map(Server::url).collect();
    let redlock = Redlock::open(&urls, config(5_000, 200)).expect("redlock");
    assert_eq!(redlock.fencing(), Fencing::Raise);
    c.pause();
    let g1 = redlock.try_acquire("acct").await;
    c.resume();
    let g1 = g1.expect("G1 from A and B");
    let f1 = g1.fence();
    assert!(f1 > raised, "G1 carries A's raised fence: {f1} after {raised}");
    g1.release().await.expect("released");

    a.pause();
    let g2 = redlock.try_acquire("acct").await;
    a.resume();
    let g2 = g2.expect("G2 from B and C");
    assert!(g2.fence() > f1, "the raise step makes G2's fence {} exceed G1's {f1}", g2.fence());
    g2.release().await.expect("released");
}

/// The library's own refusals (its keys, and as a script its first argument): clear errors
/// that create nothing, the wrong floor key or wake-up list answered with the right one.
#[test]
fn the_librarys_own_refusals_are_clear_errors_that_change_nothing() {
    let server = module_less();
    let _: String = server.cmd(&["FUNCTION", "LOAD", "REPLACE", functions::LIBRARY]).expect("loaded");
    let sha: String = server.cmd(&["SCRIPT", "LOAD", functions::eval_script()]).expect("SCRIPT LOAD");
    let (floor, wake) = (functions::floor_key(b"k"), functions::wake_key(b"k"));
    let refused = |words: &[&[u8]], text: &str| {
        let err = server.cmd::<fencedlock::redis::Value>(words).expect_err("refused");
        assert!(err.to_string().contains(text), "{err}");
    };
    // The client's error shows the reply without its `ERR ` code.
    let text =
        |start: &str, key: &[u8]| format!("{}{}", &start["ERR ".len()..], String::from_utf8_lossy(key));
    let (wrong_floor, wrong_wake) =
        (text(functions::WRONG_FLOOR_KEY, &floor), text(functions::WRONG_WAKE_KEY, &wake));
    refused(&[b"FCALL", b"fencedlock_acquire", b"2", b"k", b"not-a-floor", b"t", b"1000"], &wrong_floor);
    refused(&[b"FCALL", b"fencedlock_release", b"3", b"k", &floor, b"not-a-wake-list", b"t"], &wrong_wake);
    let keys = "pass the lock key and, optionally, the floor key of its slot";
    refused(&[b"FCALL", b"fencedlock_acquire", b"4", b"k", &floor, &wake, b"x", b"t", b"1000"], keys);
    let function = "as a script, the first argument names the function";
    refused(&[b"EVALSHA", sha.as_bytes(), b"1", b"k", b"fencedlock_nope", b"t"], function);
    refused(&[b"EVALSHA", sha.as_bytes(), b"1", b"k"], function);
    assert_eq!(server.cmd::<i64>(&["DBSIZE"]).expect("DBSIZE"), 0, "nothing was written");
}

/// A client finds a library of its own version number with other code (changed without a
/// version raise) and replaces it, instead of running that code's fences.
#[tokio::test]
async fn a_library_of_the_same_version_with_other_code_is_replaced() {
    let server = module_less();
    let altered = functions::LIBRARY.replace("local RETENTION_MS = ", "-- altered\nlocal RETENTION_MS = ");
    let _: String = server.cmd(&["FUNCTION", "LOAD", "REPLACE", &altered]).expect("loaded");
    let version: u64 = server.cmd(&["FCALL_RO", functions::VERSION_FUNCTION, "0"]).expect("version");
    assert_eq!(version, functions::VERSION, "the altered library claims this client's version");

    let locker = Locker::open(&server.url(), config(5_000, 500)).expect("locker");
    assert_eq!(locker.node().detect_engine().await.expect("detected"), Engine::Functions);
    let listed: fencedlock::redis::Value =
        server.cmd(&["FUNCTION", "LIST", "LIBRARYNAME", functions::NAME, "WITHCODE"]).expect("FUNCTION LIST");
    let code = format!("{listed:?}");
    assert!(!code.contains("-- altered"), "the client's own library is loaded now");
}

/// Version 10 of the library, as servers upgraded in place run it with leases held.
const LIBRARY_V10: &str = include_str!("fixtures/functions_v10.lua");

/// A server that ran version 10 (leases held, one released, a waiter's mark) is upgraded by
/// the client in place, and the leases stored by version 10 are kept exactly: refused to
/// others, renewed, released (waking the waiter), followed by higher fences. Versions 11 and 12
/// read them on their plain mutex's fast paths; all store the same fields in the same form, so
/// version 10 also serves what the newer library stored (a server whose library is replaced back).
#[tokio::test]
async fn leases_stored_by_library_version_10_are_served_after_the_upgrade() {
    let server = module_less();
    let _: String = server.cmd(&["FUNCTION", "LOAD", "REPLACE", LIBRARY_V10]).expect("loaded");
    assert_eq!(library_version(&server), Some(10));
    let fcall = |words: &[&[u8]]| -> Option<u64> {
        let mut all: Vec<&[u8]> = vec![b"FCALL"];
        all.extend_from_slice(words);
        server.cmd(&all).expect("FCALL")
    };
    let (held, free, waited) = (&b"up:held"[..], &b"up:free"[..], &b"up:waited"[..]);
    let (fh, ff, fw) = (functions::floor_key(held), functions::floor_key(free), functions::floor_key(waited));
    let (wh, ww) = (functions::wake_key(held), functions::wake_key(waited));

    let f1 = fcall(&[b"fencedlock_acquire", b"2", held, &fh, b"a", b"60000"]).expect("granted");
    let f2 = fcall(&[b"fencedlock_acquire", b"2", free, &ff, b"a", b"60000"]).expect("granted");
    assert_eq!(fcall(&[b"fencedlock_release", b"3", free, &ff, &functions::wake_key(free), b"a"]), Some(1));
    let f3 = fcall(&[b"fencedlock_acquire", b"2", waited, &fw, b"a", b"60000"]).expect("granted");
    assert_eq!(
        fcall(&[b"fencedlock_acquire", b"3", waited, &fw, &ww, b"w", b"60000"]),
        None,
        "a waiter's refusal"
    );

    let locker = Locker::open(&server.url(), config(5_000, 500)).expect("locker");
    assert_eq!(locker.node().detect_engine().await.expect("detected"), Engine::Functions);
    assert_eq!(library_version(&server), Some(functions::VERSION), "the client loaded its newer library");

    assert_eq!(fcall(&[b"fencedlock_acquire", b"2", held, &fh, b"b", b"60000"]), None, "still held by a");
    assert_eq!(fcall(&[b"fencedlock_acquire", b"2", held, &fh, b"a", b"60000"]), Some(f1), "a's re-entry");
    assert_eq!(fcall(&[b"fencedlock_renew", b"2", held, &fh, b"a", b"60000"]), Some(1));
    assert_eq!(fcall(&[b"fencedlock_release", b"3", held, &fh, &wh, b"b"]), Some(0), "not b's");
    assert_eq!(fcall(&[b"fencedlock_release", b"3", held, &fh, &wh, b"a"]), Some(1));
    assert_eq!(fcall(&[b"fencedlock_release", b"3", held, &fh, &wh, b"a"]), Some(0), "released once");
    let g1 = fcall(&[b"fencedlock_acquire", b"2", held, &fh, b"b", b"60000"]).expect("granted");
    let g2 = fcall(&[b"fencedlock_acquire", b"2", free, &ff, b"b", b"60000"]).expect("granted");
    assert!(g1 > f1 && g2 > f2, "fences rise: {f1} -> {g1}, {f2} -> {g2}");
    assert_eq!(fcall(&[b"fencedlock_release", b"3", waited, &fw, &ww, b"a"]), Some(1));
    assert_eq!(server.cmd::<u64>(&[&b"LLEN"[..], ww.as_slice()]).expect("LLEN"), 1, "the waiter's wake-up");
    let g3 =
        fcall(&[b"fencedlock_acquire", b"3", waited, &fw, &ww, b"w", b"60000"]).expect("the waiter's turn");
    assert!(g3 > f3);
    let status: Vec<fencedlock::redis::Value> =
        server.cmd(&[&b"FCALL"[..], b"fencedlock_status", b"1", held]).expect("STATUS");
    assert_eq!(status.len(), 3, "a mutex held without a label: {status:?}");
    assert_eq!(status[0], fencedlock::redis::Value::Int(g1 as i64));
    assert_eq!(status[1], fencedlock::redis::Value::Int(1));

    // Back to version 10: what the newer library stored is read the same.
    let _: String = server.cmd(&["FUNCTION", "LOAD", "REPLACE", LIBRARY_V10]).expect("loaded");
    assert_eq!(fcall(&[b"fencedlock_acquire", b"2", held, &fh, b"c", b"60000"]), None, "held by b");
    assert_eq!(fcall(&[b"fencedlock_renew", b"2", free, &ff, b"b", b"60000"]), Some(1));
    assert_eq!(fcall(&[b"fencedlock_release", b"3", held, &fh, &wh, b"b"]), Some(1));
    let h1 = fcall(&[b"fencedlock_acquire", b"2", held, &fh, b"c", b"60000"]).expect("granted");
    assert!(h1 > g1, "{g1} -> {h1}");
}
