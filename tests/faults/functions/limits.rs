//! Where the library does not give what the module gives, shown so docs/guarantees.md's functions
//! column can say "not held" with a test behind it:
//!
//! - No FIFO: a script cannot block, so a release only wakes a waiter, which asks again; a
//!   newcomer that asks in between is granted ahead of it (the module queues waiters in order
//!   and hands the lease to the first inside the release).
//! - Once the floor is gone too (`FLUSHALL`), fences come from the wall clock and what the
//!   library's state remembers; the script form remembers nothing, so there a fence raised past
//!   the clock (or a clock stepped back by as much) is undercut by the next grant.
//!
//! Not shown by a test: leases run on the server's wall clock (`TIME`; a script has no
//! monotonic clock), so a clock stepped forward ends leases early and one stepped back lengthens
//! them. The harness cannot step a server's clock (that needs a preloaded time library, which
//! the machines here do not have).

use std::time::Duration;

use fencedlock_protocol::command::{ACQUIRE, RAISE, RELEASE};
use harness::{error_text, Server};

use super::*;

const ROUNDS: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_asking_at_the_release_is_granted_ahead_of_the_waiter_that_asked_first() {
    // A release wakes the longest-waiting client (BLPOP on the key's wake-up list), which then
    // asks again; a newcomer whose request reaches the server in between is granted, and the
    // waiter waits on. The newcomer's request is sent with the release, in one MULTI, so it
    // always lands in that window; a newcomer that merely asks at the right moment does the
    // same. (The module hands a released lease to its first blocked waiter inside RELEASE.)
    let server = module_less(Server::builder());
    let holder_side = locker(&server, HELD_TTL);
    let waiting_side = locker(&server, HELD_TTL);
    let (acquire, release_fn) =
        (functions::function(&ACQUIRE).expect("served"), functions::function(&RELEASE).expect("served"));
    for round in 0..ROUNDS {
        let key = format!("barge:{round}");
        let holder = holder_side.try_acquire(&key).await.expect("granted");
        let waiter = tokio::spawn({
            let (locker, key) = (waiting_side.clone(), key.clone());
            async move { locker.acquire(&key).await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiter.is_finished(), "the waiter waits while the key is held");

        let mut tx = redis::pipe();
        tx.atomic()
            .cmd("FCALL")
            .arg(release_fn)
            .arg(3)
            .arg(&key)
            .arg(floor(&key))
            .arg(functions::wake_key(key.as_bytes()))
            .arg(holder.token().as_bytes())
            .cmd("FCALL")
            .arg(acquire)
            .arg(2)
            .arg(&key)
            .arg(floor(&key))
            .arg("newcomer")
            .arg(HELD_TTL.as_millis() as u64);
        let (released, newcomer): (i64, Option<u64>) =
            tx.query(&mut server.conn()).unwrap_or_else(|e| panic!("EXEC: {}", error_text(&e)));
        drop(holder.detach());
        assert_eq!(released, 1);
        let newcomer = newcomer.unwrap_or_else(|| panic!("round {round}: the newcomer was refused"));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiter.is_finished(), "round {round}: the waiter, who asked first, still waits");
        assert_eq!(held_fence(&server, &key), Some((newcomer, true)), "the newcomer holds it");

        assert!(release(&server, &key, "newcomer"));
        let waited = waiter.await.expect("task").expect("the waiter is granted in the end");
        assert!(waited.fence() > newcomer, "the waiter came second");
        assert!(waited.release().await.expect("release"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_flushall_a_fence_raised_past_the_wall_clock_stays_below_the_library_but_not_the_script() {
    // The assumption of `flushdb_and_flushall_take_the_floor_too_…` broken on purpose: a
    // holder raises its fence 10^9 above the wall-clock epoch (about 16 minutes of it, what a
    // clock stepped back by that much would do), then the floor is flushed. The library's
    // state remembers the raise and starts the next epoch above it; the script form keeps
    // nothing between calls, and its next grant is undercut.
    let server = module_less(Server::builder());
    for form in Form::both(&server) {
        let locker = Locker::open(
            &server.url(),
            config(HELD_TTL).engine(EngineChoice::Only(form.engine())).build().expect("config"),
        )
        .expect("locker");
        let mut resource = FencedResource::default();
        let lease = locker.try_acquire("raised:k").await.expect("granted");
        let target = epoch_at(wall_ms()) + 1_000_000_000;
        let raised: Option<u64> =
            call(&server, &RAISE, "raised:k", &[lease.token().as_bytes(), target.to_string().as_bytes()])
                .unwrap_or_else(|e| panic!("raise: {}", error_text(&e)));
        assert_eq!(raised, Some(target));
        assert!(resource.write(target));
        assert!(locker.release_token("raised:k", lease.token()).await.expect("release"));
        drop(lease.detach());

        let _: () = server.cmd(&["FLUSHALL"]).expect("FLUSHALL");
        let _: String =
            server.cmd(&["SCRIPT", "LOAD", functions::eval_script()]).expect("the script survives FLUSHALL");
        let next = locker.try_acquire("raised:k").await.expect("granted");
        match form {
            Form::Library => {
                assert!(next.fence() > target, "{} vs the raised {target}", next.fence());
                assert!(resource.write(next.fence()), "the next holder's write is taken");
            }
            Form::Script(_) => {
                assert!(next.fence() < target, "{} vs the raised {target}", next.fence());
                assert!(!resource.write(next.fence()), "the rightful next holder is refused by the resource");
            }
        }
        assert!(next.release().await.expect("release"));
    }
}
