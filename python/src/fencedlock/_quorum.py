"""Vote counting for Redlock, without I/O (the Rust client's ``quorum::Tally``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import List, Optional, Tuple, Union

from .errors import Cause, FencedLockError, QuorumNotReached, Unavailable, VoteShown


def quorum(nodes: int) -> int:
    """A strict majority of ``nodes``."""
    return nodes // 2 + 1


class Answer(enum.Enum):
    YES = "yes"
    REFUSED = "refused"
    NOT_AWAITED = "not awaited"


Vote = Union[int, Answer, FencedLockError]
"""A node's answer: a fence (a grant or a confirmed raise), yes, refused, an error (a node
that had not answered when the round's time ran out: ``TIMED_OUT``), or not waited for
because the round was decided without it."""


def unanswered(name: str, seconds: float) -> FencedLockError:
    """The vote of a node that had not answered when the round's time ran out: no answer,
    an outage (the Rust client's ``Vote::TimedOut``), never "not awaited"."""
    return Unavailable(f"{name}: no answer within {seconds:.3f} s", cause=Cause.TIMED_OUT)


def is_yes(vote: Vote) -> bool:
    return vote is Answer.YES or (isinstance(vote, int) and not isinstance(vote, bool) and not isinstance(vote, Answer))


@dataclass
class Tally:
    """Counts a round's votes as they arrive and says when its outcome can no longer change:
    ``quorum`` yes votes, or too few requests out for the yes votes to reach it. An
    ``either_way`` tally also waits until a definite no (a majority refused) is settled."""

    quorum: int
    outstanding: int
    either_way: bool = False
    yes: int = 0
    refused: int = 0
    definite_no: int = field(init=False)

    def __post_init__(self) -> None:
        self.definite_no = self.outstanding - self.quorum + 1

    def record(self, vote: Vote) -> None:
        self.outstanding -= 1
        if is_yes(vote):
            self.yes += 1
        elif vote is Answer.REFUSED:
            self.refused += 1

    def decided(self) -> bool:
        yes_settled = self.yes >= self.quorum or self.yes + self.outstanding < self.quorum
        if not self.either_way:
            return yes_settled
        return (
            self.yes >= self.quorum
            or self.refused >= self.definite_no
            or (yes_settled and self.refused + self.outstanding < self.definite_no)
        )


def majority_held(votes: List[Vote], q: int) -> Optional[bool]:
    """``True`` once a majority said yes, ``False`` once so many refused that none can have,
    ``None`` while the nodes that failed or were not awaited could tip it."""
    if sum(map(is_yes, votes)) >= q:
        return True
    if sum(v is Answer.REFUSED for v in votes) > len(votes) - q:
        return False
    return None


def outage(votes: List[Vote]) -> Optional[FencedLockError]:
    """The first outage among the votes when no majority formed because nodes could not
    answer (timed out, unreachable, not ready, ...) and none refused; ``None`` when any node
    refused (a refusal is the service answering "held", never "unavailable"; the Rust client's
    ``Error::is_unavailable``) or no node failed with an outage."""
    if any(v is Answer.REFUSED for v in votes):
        return None
    for vote in votes:
        if isinstance(vote, FencedLockError) and vote.cause is not None and vote.cause.is_outage:
            return vote
    return None


def shown(votes: List[Vote], names: List[str]) -> List[Tuple[str, VoteShown]]:
    """The votes as :attr:`QuorumNotReached.votes` carries them."""
    return [(name, vote.value if isinstance(vote, Answer) else vote) for name, vote in zip(names, votes)]


def not_reached(key: str, votes: List[Vote], names: List[str]) -> Optional[QuorumNotReached]:
    """The error of a round without a majority that was an outage (see :func:`outage`), or
    ``None`` when it was "held"."""
    failure = outage(votes)
    if failure is None:
        return None
    return QuorumNotReached(f"no majority for {key!r}: {describe(votes, names)}", shown(votes, names), cause=failure.cause)


def describe(votes: List[Vote], names: List[str]) -> str:
    shown = []
    for name, vote in zip(names, votes):
        if isinstance(vote, Answer):
            text = vote.value
        elif isinstance(vote, FencedLockError):
            text = f"failed ({vote})"
        else:
            text = f"granted fence {vote}"
        shown.append(f"{name}: {text}")
    return "; ".join(shown)
