"""The pure parts without a server: error classification, status decoding, request words,
validity arithmetic."""

from __future__ import annotations

import pytest
import redis.exceptions as rexc

from fencedlock import BadReply, Cause, LockStatus, PermitStatus, SemaphoreStatus, _keys, _multi, _serving, _terms, _wire
from fencedlock._wire import Engine
from fencedlock.errors import (InvalidArgument, PermitsMismatch, ReplyError, ServerError, Unavailable, UpgradeRefused,
                               WrongType, translate)


@pytest.mark.parametrize(
    "exc, cls, cause",
    [
        (rexc.ResponseError("ttl must be a positive integer number of milliseconds"), InvalidArgument, Cause.OTHER),
        (rexc.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"), WrongType, Cause.OTHER),
        (rexc.ResponseError("permits mismatch: the key is held with PERMITS 3; ..."), PermitsMismatch, Cause.OTHER),
        (rexc.ResponseError("BUSY Redis is busy running a script."), Unavailable, Cause.BUSY),
        (rexc.ResponseError("NOREPLICAS Not enough good replicas to write."), Unavailable, Cause.NO_REPLICAS),
        (rexc.BusyLoadingError("Redis is loading the dataset in memory"), Unavailable, Cause.NOT_READY),
        (rexc.ReadOnlyError("You can't write against a read only replica."), Unavailable, Cause.READ_ONLY),
        (rexc.NoPermissionError("User app has no permissions"), ServerError, Cause.NO_PERMISSION),
        (rexc.ConnectionError("Connection refused"), Unavailable, Cause.UNREACHABLE),
        (rexc.TimeoutError("Timeout reading"), Unavailable, Cause.TIMED_OUT),
        (rexc.AuthenticationError("invalid password"), ServerError, Cause.CREDENTIALS),
        (rexc.ResponseError("unknown command 'FENCEDLOCK.ACQUIRE', with args beginning with: 'k' 'tok'"), ServerError,
         Cause.NO_MODULE),
    ],
)
def test_errors_are_classified_by_one_rule(exc: Exception, cls: type, cause: Cause) -> None:
    err = translate(exc, "n", b"tok")
    assert type(err) is cls and err.cause is cause
    assert "tok'" not in str(err)
    assert err.is_unavailable == (cls is Unavailable)


def test_restart_grace_is_unavailable_and_a_moved_key_is_not() -> None:
    grace = translate(rexc.ResponseError("TRYAGAIN fencedlock restart grace: new grants are refused for another 9 ms"), "n")
    assert isinstance(grace, Unavailable) and grace.reply_error is ReplyError.RESTART_GRACE
    moved = translate(rexc.ResponseError("TRYAGAIN fencedlock wait interrupted: ..."), "n")
    assert not isinstance(moved, Unavailable) and moved.is_retryable


def test_status_replies_are_decoded_and_broken_ones_refused() -> None:
    assert _wire.decode_status(None) is None
    assert _wire.decode_status([7, 1, 250]) == LockStatus(7, True, 0.25, None)
    assert _wire.decode_status([7, 1, 250, b"a"]) == LockStatus(7, True, 0.25, b"a")
    assert _wire.decode_status([7, 0, -1]) == LockStatus(7, False, None, None)
    sem = _wire.decode_status([9, 2, 3, [[4, 100, b"w"], [9, 250, None]]])
    assert isinstance(sem, SemaphoreStatus) and sem.free == 1 and [h.fence for h in sem.holders] == [4, 9]
    for broken in ([0, 0, -1], [7, 2, -1], [7, 1, -1], [7, 0, 5], [7, 0, -1, b"x"], [7, 1],
                   [9, 2, 3, [[9, 1, None], [4, 1, None]]], [9, 1, 3, [[10, 1, None]]], [9, 2, 1, [[1, 1, None], [2, 1, None]]],
                   [9, 0, -1, []], [9, 0, 1025, []], [9, 1, 0, []], [9, 0, 0, [[4, 1, None]]],
                   [2000, 1025, 0, [[f, 1, None] for f in range(1, 1026)]]):
        with pytest.raises(BadReply):
            _wire.decode_status(broken)


def test_a_key_held_by_read_leases_decodes_with_permits_0() -> None:
    readers = _wire.decode_status([9, 3, 0, [[4, 10, None], [5, 3, b"r-2"], [9, 1, None]]])
    assert isinstance(readers, SemaphoreStatus) and readers.is_shared
    assert (readers.permits, readers.capacity, readers.free) == (0, 1024, 1021)
    assert [(h.fence, h.remaining, h.label) for h in readers.holders] == [(4, 0.01, None), (5, 0.003, b"r-2"), (9, 0.001, None)]
    idle = _wire.decode_status([9, 0, 0, []])
    assert isinstance(idle, SemaphoreStatus) and idle.is_shared and idle.holders == () and idle.free == 1024
    full = _wire.decode_status([2000, 1024, 0, [[f, 1, None] for f in range(1, 1025)]])
    assert isinstance(full, SemaphoreStatus) and full.free == 0
    sem = _wire.decode_status([9, 1, 3, [[4, 100, None]]])
    assert isinstance(sem, SemaphoreStatus) and not sem.is_shared and sem.capacity == 3
    # A waiter naps until the first reader's lease ends (a writer is woken at its release or
    # expiry), not for a spare permit: readers admit more readers but no writer.
    assert _wire.held_for(readers) == pytest.approx(0.001)
    assert _wire.held_for(sem) == 0.0 and _wire.held_for(idle) == 0.0
    # The write lease (a mutex key) as holders, as ReadWriteLock.status shows it.
    assert _wire.as_semaphore(LockStatus(7, True, 0.25, b"w")) == SemaphoreStatus(7, 1, (PermitStatus(7, 0.25, b"w"),))
    assert _wire.as_semaphore(LockStatus(7, False, None, None)) == SemaphoreStatus(7, 1, ())
    assert _wire.as_semaphore(readers) is readers and _wire.as_semaphore(None) is None


def test_an_upgrade_refusal_is_its_own_final_error() -> None:
    text = "upgrade refused: the token holds the key SHARED; release it, then acquire without SHARED (a new, higher fence)"
    err = translate(rexc.ResponseError(text), "n", b"tok")
    assert type(err) is UpgradeRefused and isinstance(err, ServerError)
    assert err.reply_error is ReplyError.UPGRADE_REFUSED and err.cause is Cause.OTHER
    assert not err.is_retryable and not err.is_unavailable and not err.reply_error.is_bad_request
    held = translate(rexc.ResponseError("permits mismatch: the key is held SHARED; ask with SHARED (...)"), "n")
    assert type(held) is PermitsMismatch
    syntax = translate(rexc.ResponseError(
        "syntax error: the options are BLOCK timeout_ms, LABEL label, and PERMITS n or SHARED, each at most once"), "n")
    assert type(syntax) is InvalidArgument and syntax.reply_error is ReplyError.SYNTAX


def test_each_engine_names_the_command_its_own_way() -> None:
    key = b"k"
    floor, wake = b"fencedlock:fn-floor:{" + _keys.floor_tag(_keys.key_slot(key)) + b"}", _keys.wake_key(key)
    assert _wire.acquire(Engine.MODULE, key, b"t", 500) == ("FENCEDLOCK.ACQUIRE", key, b"t", 500)
    assert _wire.acquire(Engine.MODULE, key, b"t", 500, label=b"w", permits=3, block_ms=0) == (
        "FENCEDLOCK.ACQUIRE", key, b"t", 500, "LABEL", b"w", "PERMITS", 3, "BLOCK", 0)
    assert _wire.acquire(Engine.MODULE, key, b"t", 500, permits=1) == ("FENCEDLOCK.ACQUIRE", key, b"t", 500)
    # SHARED as the protocol's Acquire::words puts it: a word alone, after PERMITS, before BLOCK.
    assert _wire.acquire(Engine.MODULE, key, b"t", 500, shared=True) == ("FENCEDLOCK.ACQUIRE", key, b"t", 500, "SHARED")
    assert _wire.acquire(Engine.MODULE, key, b"t", 500, label=b"SHARED", shared=True, block_ms=5) == (
        "FENCEDLOCK.ACQUIRE", key, b"t", 500, "LABEL", b"SHARED", "SHARED", "BLOCK", 5)
    assert _wire.acquire(Engine.FUNCTIONS, key, b"t", 5, shared=True, waiting=True) == (
        "FCALL", "fencedlock_acquire", 3, key, floor, wake, b"t", 5, "SHARED")
    with pytest.raises(InvalidArgument):
        _wire.acquire(Engine.MODULE, key, b"t", 500, permits=2, shared=True)
    assert _wire.acquire(Engine.FUNCTIONS, key, b"t", 5) == ("FCALL", "fencedlock_acquire", 2, key, floor, b"t", 5)
    assert _wire.acquire(Engine.FUNCTIONS, key, b"t", 5, waiting=True) == (
        "FCALL", "fencedlock_acquire", 3, key, floor, wake, b"t", 5)
    assert _wire.command(Engine.FUNCTIONS, "FENCEDLOCK.RELEASE", key, (b"t",)) == (
        "FCALL", "fencedlock_release", 3, key, floor, wake, b"t")
    assert _wire.command(Engine.FUNCTIONS, "FENCEDLOCK.STATUS", key, ()) == ("FCALL", "fencedlock_status", 1, key)
    assert _wire.command(Engine.SCRIPT, "FENCEDLOCK.RENEW", key, (b"t", 5)) == (
        "EVALSHA", _wire.SCRIPT_SHA, 2, key, floor, "fencedlock_renew", b"t", 5)


def test_validity_and_naps() -> None:
    clock = _terms.Clock()
    assert clock.drift(10_000) == pytest.approx(0.102)
    assert clock.deadline(100.0, 10_000) == pytest.approx(100 + 10 - 0.102)
    assert clock.needs_anchor(3.0, 10_000) and not clock.needs_anchor(2.0, 10_000)
    assert _serving.blpop_timeout(1.5) == "1.500" and _serving.blpop_timeout(0) == "0.001"
    assert _serving.blpop_timeout(0.0012) == "0.002"
    assert _serving.nap(0.2, 10) == pytest.approx(0.201) and _serving.nap(0, 10) == _serving.MIN_NAP
    assert _serving.nap(0.2, 0.05) == 0.05
    assert _terms.ttl_ms(30) == 30_000 and _terms.ttl_ms(0.001) == 1
    with pytest.raises(InvalidArgument):
        _terms.Clock(factor=1.0)


def test_a_set_in_one_command_replies_and_server_facts() -> None:
    assert _wire.fences_of(None, 2) is None
    assert _wire.fences_of([3, 4], 2) == [3, 4]
    for broken in ([3], [3, None], [3, 0], [3, b"4"], 7):
        with pytest.raises(BadReply):
            _wire.fences_of(broken, 2)
    # Which sets go in one command: the module has it; 1 to 64 keys; one slot on a cluster.
    keys = [f"k{i}".encode() for i in range(65)]
    plain, cluster = _multi.OneCommand(known=True, one_slot=False), _multi.OneCommand(known=True, one_slot=True)
    assert plain.takes(keys[:64]) and not plain.takes(keys) and not plain.takes([])
    assert not _multi.NOT_SERVED.takes([b"a"]) and not cluster.takes([b"a", b"b"])
    assert cluster.takes([b"{t}a", b"{t}b"])
    # The Functions library: keys of one slot on any server, up to 64.
    tagged = [b"{t}" + key for key in keys]
    assert _multi.LIBRARY.takes(tagged[:64]) and _multi.LIBRARY.takes([b"a"])
    assert not _multi.LIBRARY.takes(tagged) and not _multi.LIBRARY.takes([b"a", b"b"]) and not _multi.LIBRARY.takes([])
    assert _multi.known([None]) is False and _multi.known([["fencedlock.acquireall", -5]]) and not _multi.known(None)
    assert not _multi.clustered(b"# Cluster\r\ncluster_enabled:0\r\n") and not _multi.clustered("cluster_enabled:0")
    assert _multi.clustered(b"# Cluster\r\ncluster_enabled:1\r\n") and _multi.clustered(None), "one slot when unsure"
    # Only a request without a reply may have been granted.
    assert _multi.may_have_granted(translate(rexc.TimeoutError("Timeout reading"), "n"))
    assert _multi.may_have_granted(_multi.granted_too_late("n"))
    assert not _multi.may_have_granted(translate(rexc.ResponseError("WRONGTYPE Operation against a key"), "n"))
    assert not _multi.may_have_granted(translate(rexc.ResponseError("CROSSSLOT Keys in request don't hash"), "n"))
    assert _multi.holds(LockStatus(3, True, 1.0, None)) and not _multi.holds(LockStatus(3, False, None, None))
    assert not _multi.holds(None) and _multi.every_key(["a", "b"]) == "a b"
