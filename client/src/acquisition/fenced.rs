//! The raise step of fenced Redlock. What it is for, and why it makes fences increase across
//! majorities, is documented on [`Fencing`].

use crate::acquisition::round;
use crate::node::Node;
use crate::quorum::{QuorumReport, Vote};
use crate::token::Token;

/// How a [`Redlock`](crate::Redlock) derives a lease's fence from the per-node fences.
///
/// [`Fencing::Raise`], the default, is fenced Redlock: a raise step that makes a Redlock
/// grant's fence exceed every earlier grant's fence. [`Fencing::QuorumMax`] is plain Redlock.
///
/// # Why plain Redlock has no usable fence
///
/// Every master keeps its own fence counter. A Redlock grant is a majority of masters, and
/// successive grants may come from *different* majorities, so the obvious "fence = the
/// largest fence in the quorum" can go backwards: with masters A, B, C where A has issued
/// fence 10 and B, C fence 1, a grant from {A, B} carries 10 and the next grant, from {B, C}
/// while A is unreachable, carries 2. A resource that checks fences would now refuse the
/// rightful holder, or (checking `>=` against a stale holder) accept the wrong one.
///
/// # The raise step
///
/// After a majority granted the lease with fences `f_1 .. f_k`, the client computes
/// `F = max f_i` and sends `FENCEDLOCK.RAISE key token F` to every granting node whose fence
/// is below `F`. The module raises the key's fence to `max(current, F)` **only while `token`
/// holds the unexpired lease there**, and replies with the resulting fence (nil otherwise). A
/// node that granted `F` itself is asked nothing: its grant is the same proof, made while our
/// token held the lease there. The lease is handed to the caller, with fence `F`, only after a
/// majority `M1` confirmed: nodes that granted `F`, and nodes that replied `>= F` to the raise.
///
/// Both rounds end as soon as their outcome is certain. "Granting nodes" are the nodes whose
/// grant the client *received* before the acquisition round was decided, and `M1` is the set
/// of nodes whose grant of `F` or raise confirmation it received. A straggler whose grant
/// arrives late (or is never waited for) gets no raise and is not in `M1`; neither is a
/// granting node whose confirmation was not waited for. The argument below uses only `M1`, so
/// stragglers do not weaken it: a late grant to our token merely holds that node until the
/// lease is released (on every node) or expires, and a late raise can only increase a fence.
///
/// # Safety argument
///
/// Let grant `G1` carry fence `F1`, confirmed by majority `M1`, and let `G2` be any later grant,
/// by majority `Q2`, whose fence is `F2`. Claim: `F2 > F1`.
///
/// 1. `M1` and `Q2` are majorities of the same N masters, so they share a node `n`. (`Q2` is
///    the set of nodes whose grants `G2`'s client received and took the maximum over; it is
///    a majority, or `G2` would not have been handed out.)
/// 2. On `n`, `G1`'s raise succeeded, and it is owner-checked: it ran while `n` held `G1`'s
///    token (or `n` granted `F1` itself, to that token). `n` cannot grant `G2` (a different
///    token) before `G1`'s lease on `n` ended, so on `n` the order is: grant `G1`, raise to
///    `F1` (or none), end of `G1`, grant `G2`.
/// 3. When `n` grants `G2` its fence is `max(key fence, high-water mark) + 1 >= F1 + 1`,
///    because the raise (or the grant of `F1`) left the key's fence (and so the node's
///    high-water mark) at `>= F1`.
/// 4. `G2`'s fence is the maximum over `Q2`, which includes `n`: `F2 >= fence_n(G2) > F1`.
///    A node outside `Q2` (one `G2` did not wait for) plays no part, so stopping early at a
///    majority loses nothing here.
///
/// The argument needs only that `G2`'s grant on `n` comes after `G1`'s on `n`, which holds for
/// any two grants whose leases do not overlap — the same condition under which Redlock
/// provides mutual exclusion at all.
///
/// # Assumption: a majority keeps its state
///
/// Step 3 needs `n` to remember the raised fence when it grants `G2`. That holds while the
/// node keeps its state: it does not restart, or it restarts from a persisted state that
/// includes the raise (`appendonly yes` with `appendfsync always`), or it restarts with an
/// new epoch / restart grace. On every start-up load the module starts a new epoch at the
/// wall clock ([`floor_at`](fencedlock_protocol::epoch::floor_at)), so a node that lost its
/// most recent fences still issues fences above every fence any node issued before, as long
/// as the clocks of the nodes agree within the time since; `fencedlock.restart-grace-ms`
/// additionally refuses grants until every lease that might have been lost has expired.
///
/// If nodes of `M1` restart *empty* (no persistence, so no load and no new epoch) the intersection node may
/// have forgotten `F1`, and `F2 <= F1` becomes possible — the same failure that breaks
/// Redlock's mutual exclusion without persistence or delayed restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fencing {
    /// Fenced Redlock: raise every granting node to the quorum's maximum and hand the lease
    /// out only after a majority confirmed. Fences strictly increase across grants while a
    /// majority keeps its state (see the safety argument on [`Fencing`]).
    #[default]
    Raise,
    /// Plain Redlock: the lease's fence is the largest per-node fence in the quorum, with
    /// no raise step. **Fences can go backwards** when successive grants come from different
    /// majorities; kept for comparison and for callers that ignore fences.
    QuorumMax,
}

/// Raises the fence on every node that granted in `report` below the report's maximum and
/// records each node's answer, until a majority confirmed or no longer can. Returns the fence
/// if a majority confirmed it.
///
/// A node whose grant already carried the maximum is confirmed by that grant, with no RAISE
/// sent: it issued the fence to our token, so its key's fence and high-water mark are at the
/// maximum while we hold the lease there, which is all a raise's reply proves (step 2 of the
/// safety argument on [`Fencing`]). On a key leased again and again, the raise of one lease
/// leaves every node at the same fence, so the next leases' grants agree and most need no
/// raise round at all: two round trips a lease, as plain Redlock, instead of three.
pub(crate) async fn raise(
    nodes: &[Node],
    key: &str,
    token: &Token,
    report: &mut QuorumReport,
) -> Option<u64> {
    let target = report.max_fence()?;
    let mut below = Vec::new();
    for (i, entry) in report.votes.iter_mut().enumerate() {
        match entry.vote {
            Vote::Granted { fence } if fence >= target => entry.raise = Some(Vote::Confirmed),
            Vote::Granted { .. } => below.push(i),
            _ => {}
        }
    }
    let confirmed = report.raised();
    if confirmed < report.quorum {
        let requests = below.iter().filter_map(|&i| nodes.get(i)).map(|node| async move {
            match node.raise(key, token, target).await {
                Ok(Some(fence)) if fence >= target => Vote::Granted { fence },
                Ok(_) => Vote::Refused,
                Err(failure) => failure.into_vote(),
            }
        });
        let votes = round::until_decided(requests, report.quorum - confirmed).await;
        for (&i, vote) in below.iter().zip(votes) {
            if let Some(entry) = report.votes.get_mut(i) {
                entry.raise = Some(vote);
            }
        }
    }
    (report.raised() >= report.quorum).then_some(target)
}
