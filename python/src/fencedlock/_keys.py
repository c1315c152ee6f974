"""Lock keys: which are acceptable, their Redis Cluster slot, and the names of the Functions
library's floor key and wake-up list for a key (the library's version-5 rule)."""

from __future__ import annotations

import binascii
import itertools
import unicodedata
from typing import Iterable, List, Optional, Tuple

from . import _contract
from .errors import InvalidArgument


def check_key(key: object) -> bytes:
    """``key`` as the bytes sent, or :class:`InvalidArgument` for a key that is not a string,
    empty, blank or holds a control character (refused before any request)."""
    if not isinstance(key, str):
        raise InvalidArgument(f"a lock key is a str, got {type(key).__name__}")
    if not key or key.isspace():
        raise InvalidArgument("a lock key must not be empty or blank")
    if any(unicodedata.category(ch) == "Cc" for ch in key):
        raise InvalidArgument("a lock key must not contain control characters")
    return key.encode("utf-8")


def key_slot(key: bytes) -> int:
    """The Redis Cluster slot of ``key`` (``CLUSTER KEYSLOT``): CRC16-XMODEM of the hash tag
    (the bytes between the first ``{`` and the first ``}`` after it, if any are between) or
    of the whole key, modulo 16384."""
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            key = key[start + 1 : end]
    return binascii.crc_hqx(key, 0) % _contract.SLOTS


_TAGS: Optional[List[bytes]] = None


def floor_tag(slot: int) -> bytes:
    """The one six-character tag ``d1..d6`` (``d1, d2`` in 0-7, ``d3..d6`` in 0-3) whose own
    slot is ``slot``: exactly one such string hashes to each of the 16,384 slots."""
    global _TAGS
    if _TAGS is None:
        tags: List[Optional[bytes]] = [None] * _contract.SLOTS
        for digits in itertools.product(b"01234567", b"01234567", *([b"0123"] * 4)):
            tag = bytes(digits)
            tags[binascii.crc_hqx(tag, 0) % _contract.SLOTS] = tag
        if any(tag is None for tag in tags):
            raise AssertionError("the floor tags do not cover every slot")
        _TAGS = [tag for tag in tags if tag is not None]
    return _TAGS[slot % _contract.SLOTS]


def floor_key(key: bytes) -> bytes:
    """``fencedlock:fn-floor:{TAG}``: the floor key of ``key``'s slot."""
    return _contract.FLOOR_KEY_PREFIX.encode() + floor_tag(key_slot(key)) + b"}"


def wake_key(key: bytes) -> bytes:
    """``fencedlock:fn-wake:{TAG}:key``: the wake-up list of ``key``, in its slot."""
    return _contract.WAKE_KEY_PREFIX.encode() + floor_tag(key_slot(key)) + b"}:" + key


def record_key(key: bytes) -> bytes:
    """``fencedlock:last-run:{TAG}:key``: the run record of the periodic job on ``key``, in
    its slot (the tag is the slot's floor tag, as for the wake-up list)."""
    return _contract.RECORD_KEY_PREFIX.encode() + floor_tag(key_slot(key)) + b"}:" + key


def taking_order(keys: Iterable[str]) -> Tuple[List[str], List[str]]:
    """``keys`` as named, and in the order every caller takes them: their bytes' order, so
    that callers naming overlapping sets in different orders cannot deadlock (the one that
    waits holds nothing the other needs). :class:`InvalidArgument` for a bad key, no keys or
    a key named twice (one lease per key), before any request."""
    if isinstance(keys, (str, bytes)):
        raise InvalidArgument("keys is a list of lock keys, not one key")
    named = list(keys)
    if not named:
        raise InvalidArgument("acquire_all needs at least one key")
    raw = {key: check_key(key) for key in named}
    if len(raw) != len(named):
        raise InvalidArgument("acquire_all: a key is named twice (one lease per key)")
    return named, sorted(named, key=raw.__getitem__)
