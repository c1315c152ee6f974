"""Every fact of the wire contract the package restates is read back from the protocol
crate's source (``protocol/src``), and the shipped library is a byte-for-byte copy of
``functions.lua``: when the crate changes, this fails until the package follows
(``python/sync-library`` refreshes the copy)."""

from __future__ import annotations

import binascii
import re
from pathlib import Path

import fencedlock
from fencedlock import _contract, _keys, _periodic, _wire
from fencedlock.errors import Cause

PROTOCOL = Path(__file__).resolve().parents[2] / "protocol" / "src"


def source(name: str) -> str:
    return (PROTOCOL / name).read_text()


def rust_const(text: str, name: str) -> int:
    """The value of ``pub const NAME: T = expr;`` (integer arithmetic and shifts)."""
    found = re.search(rf"pub const {name}: \w+ = ([^;]+);", text)
    assert found, f"{name} not found"
    expr = found.group(1).strip()
    if re.fullmatch(r"[A-Z_]+", expr):
        return rust_const(text, expr)
    expr = expr.replace("i64::MAX as u64", str((1 << 63) - 1)).replace("_", "")
    assert re.fullmatch(r"[\d\s()*+<-]+", expr), expr
    return int(eval(expr))  # digits and operators only, checked above


def rust_str(text: str, name: str) -> str:
    found = re.search(rf'pub const {name}: &str = "([^"]*)";', text)
    assert found, f"{name} not found"
    return found.group(1)


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", '"': '"', "'": "'"}


def rust_str_literal(text: str, name: str) -> str:
    """The value of ``pub const NAME: &str = "…";`` as the compiler reads it: escapes decoded,
    and a backslash at a line's end dropping the newline and the next line's leading
    whitespace. Any other escape fails the test rather than being guessed."""
    found = re.search(rf'pub const {name}: &str = "((?:[^"\\]|\\.)*)";', text, re.S)
    assert found, f"{name} not found"
    raw, out, i = found.group(1), [], 0
    while i < len(raw):
        if raw[i] != "\\":
            out.append(raw[i])
            i += 1
        elif raw[i + 1] == "\n":
            i += 2
            while i < len(raw) and raw[i] in " \t\r\n":
                i += 1
        else:
            assert raw[i + 1] in _ESCAPES, f"escape \\{raw[i + 1]} in {name}"
            out.append(_ESCAPES[raw[i + 1]])
            i += 2
    return "".join(out)


def test_the_shipped_library_is_the_protocols() -> None:
    assert _wire.LIBRARY == source("functions.lua"), "run python/sync-library"


def test_limits() -> None:
    limits = source("limits.rs")
    for name in ("MAX_TOKEN_LEN", "MAX_LABEL_LEN", "MAX_PERMITS", "MAX_ACQUIRE_KEYS", "DEFAULT_MAX_TTL_MS",
                 "MAX_MAX_TTL_MS", "MAX_FENCE", "EPOCH_GAP", "MAX_BLOCK_MS"):
        assert getattr(_contract, name) == rust_const(limits, name), name
    assert _contract.SLOTS == rust_const(source("cluster.rs"), "SLOTS")


def test_command_names_and_option_words() -> None:
    command = source("command.rs")
    for ident in ("ACQUIRE", "ACQUIREALL", "RENEW", "RELEASE", "RAISE", "STATUS"):
        found = re.search(rf'\b{ident} = "([^"]+)"', command)
        assert found and getattr(_contract, ident) == found.group(1), ident
    for word in ("BLOCK", "LABEL", "PERMITS", "SHARED"):
        assert getattr(_contract, word) == rust_str(command, word)
    assert _contract.SHARED_PERMITS == rust_const(command, "SHARED_PERMITS")
    # The words of a request in the order the protocol's Acquire::words sends them.
    words = source("request.rs")
    body = words[words.index("impl<'a> Request<'a> for Acquire<'a>"):]
    order = re.findall(r"Cow::Borrowed\((LABEL|PERMITS|SHARED|BLOCK)\.as_bytes\(\)\)", body[:body.index("\n}\n")])
    assert order == ["LABEL", "PERMITS", "SHARED", "BLOCK"], order
    sent = _wire.acquire(_wire.Engine.MODULE, b"k", b"t", 1, label=b"l", shared=True, block_ms=1)
    assert [w for w in sent if w in (_contract.LABEL, _contract.SHARED, _contract.BLOCK)] == ["LABEL", "SHARED", "BLOCK"]
    # ACQUIREALL: the name, the count and the keys, then ACQUIRE's words after its key, no BLOCK.
    body = words[words.index("impl<'a> Request<'a> for AcquireAll<'a>"):]
    body = body[:body.index("\n}\n")]
    assert "ACQUIREALL.name.as_bytes()), decimal(self.keys.len() as u64)]" in body
    assert "Acquire { block_ms: None, ..self.each }.words().into_iter().skip(2)" in body
    assert _wire.acquire_all([b"a", b"b"], b"t", 5, label=b"l") == (_contract.ACQUIREALL, 2, b"a", b"b", b"t", 5, "LABEL", b"l")


def test_the_libraries_names_version_and_keys() -> None:
    functions = source("functions.rs")
    assert _contract.LIBRARY_NAME == rust_str(functions, "NAME")
    assert _contract.VERSION_FUNCTION == rust_str(functions, "VERSION_FUNCTION")
    assert _contract.LIBRARY_VERSION == rust_const(functions, "VERSION")
    assert f"\nlocal VERSION = {_contract.LIBRARY_VERSION}\n" in source("functions.lua")
    assert _contract.FLOOR_KEY_PREFIX == rust_str(functions, "FLOOR_KEY_PREFIX")
    assert _contract.WAKE_KEY_PREFIX == rust_str(functions, "WAKE_KEY_PREFIX")
    assert _contract.WAKE_TTL_MS == rust_const(functions, "WAKE_TTL_MS")
    assert _contract.MAX_SAFE_FENCE == rust_const(functions, "MAX_SAFE_FENCE")
    table = dict(re.findall(r"\((\w+), \"(fencedlock_\w+)\"\)", functions))
    assert {getattr(_contract, k): v for k, v in table.items() if k != "CAD"} == _contract.FUNCTIONS
    # Which functions take the floor key and the wake-up list.
    assert "fencedlock_cad\" | \"fencedlock_status" in functions
    # ACQUIREALL takes the floor too, but last, after every lock key (call_keys_all).
    assert _contract.TAKES_FLOOR == set(_contract.FUNCTIONS) - {_contract.STATUS, _contract.ACQUIREALL}
    rule = re.search(r"pub fn call_keys_all\(keys: &\[&\[u8\]\]\) -> Vec<Vec<u8>> \{(.*?)\n\}", functions, re.S)
    assert rule and "all.push(floor_key(first));" in rule.group(1) and "keys.first()" in rule.group(1), (
        "call_keys_all changed: restate it in fencedlock._wire.acquire_all"
    )
    floor = _keys.floor_key(b"{t}a")
    assert _wire.acquire_all([b"{t}a", b"{t}b"], b"t", 5, label=b"l", engine=_wire.Engine.FUNCTIONS) == (
        "FCALL", "fencedlock_acquireall", 3, b"{t}a", b"{t}b", floor, b"t", 5, "LABEL", b"l"
    )
    assert _wire.acquire_all([b"{t}a"], b"t", 5, engine=_wire.Engine.SCRIPT) == (
        "EVALSHA", _wire.SCRIPT_SHA, 2, b"{t}a", floor, "fencedlock_acquireall", b"t", 5
    )
    assert 'function(command) == Some("fencedlock_release")' in functions
    assert _contract.TAKES_WAKE == {_contract.RELEASE}


def test_error_codes_and_prefixes() -> None:
    error = source("error.rs")
    prefixes = dict(re.findall(r'ReplyError::(\w+) => "([^"]+)",', error[error.index("fn prefix"):]))
    codes_block = error[error.index("fn code"):error.index("fn prefix")]
    tryagain = re.search(r"ReplyError::(\w+) \| ReplyError::(\w+) => \"TRYAGAIN\"", codes_block)
    wrongtype = re.search(r"ReplyError::(\w+) => \"WRONGTYPE\"", codes_block)
    assert tryagain and wrongtype

    def python_name(rust: str) -> str:
        return re.sub(r"(?<!^)(?=[A-Z])", "_", rust).upper()

    assert {python_name(k) for k in prefixes} == {kind.name for kind in _contract.ReplyError}
    for rust, prefix in prefixes.items():
        kind = _contract.ReplyError[python_name(rust)]
        code = "TRYAGAIN" if rust in tryagain.groups() else "WRONGTYPE" if rust == wrongtype.group(1) else "ERR"
        assert (kind.code, kind.prefix) == (code, prefix), rust
    bad = re.search(r"fn is_bad_request.*?matches!\((.*?)\)\s*\}", error, re.S)
    assert bad
    assert {python_name(k) for k in re.findall(r"ReplyError::(\w+)", bad.group(1))} == {
        k.name for k in _contract.ReplyError if k.is_bad_request
    }


def test_causes_are_the_rust_clients() -> None:
    cause = (PROTOCOL.parents[1] / "client" / "src" / "cause.rs").read_text()
    block = cause[cause.index("pub enum Cause"):cause.index("impl Cause")]
    rust = re.findall(r"^    (\w+),$", block, re.M)
    python = {re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper() for name in rust}
    assert python == {c.name for c in Cause}


def test_slots_match_the_protocols_cluster_keyslot_examples() -> None:
    cluster = source("cluster.rs")
    examples = re.findall(r'assert_eq!\(key_slot\(b"([^"]+)"\), (\d+)\);', cluster)
    assert len(examples) >= 3
    for key, slot in examples:
        assert _keys.key_slot(key.encode()) == int(slot), key
    assert binascii.crc_hqx(b"123456789", 0) == 0x31C3


def test_floor_tags_follow_the_version_5_rule() -> None:
    tags = [_keys.floor_tag(slot) for slot in range(_contract.SLOTS)]
    assert len(set(tags)) == _contract.SLOTS
    for slot, tag in enumerate(tags):
        assert re.fullmatch(rb"[0-7]{2}[0-3]{4}", tag), tag
        assert _keys.key_slot(tag) == slot
    functions = source("functions.rs")
    assert rust_const(functions, "FLOOR_TAG_LEN") == 6
    examples = re.findall(r'assert_eq!\(&floor_tag\((\d+)\), b"(\d+)"\);', functions)
    examples += [(str(_keys.key_slot(k.encode())), t) for k, t in
                 re.findall(r'assert_eq!\(floor_key\(b"([^"]+)"\), b"fencedlock:fn-floor:\{(\d+)\}"\);', functions)]
    assert len(examples) >= 2
    for slot, tag in examples:
        assert _keys.floor_tag(int(slot)) == tag.encode(), slot
    for key, name in re.findall(r'assert_eq!\(wake_key\(b"([^"]+)"\), b"([^"]+)"\);', functions):
        assert _keys.wake_key(key.encode()) == name.encode()
    assert _keys.floor_tag(6125) == b"221102" and _keys.key_slot(b"lockk") == 6125
    assert _keys.floor_key(b"lockk") == b"fencedlock:fn-floor:{221102}"
    assert _keys.wake_key(b"lockk") == b"fencedlock:fn-wake:{221102}:lockk"
    for key in (b"invoice:inv_72", b"{user1}.lock", b"a{b", b"\xff\x00"):
        assert _keys.key_slot(_keys.floor_key(key)) == _keys.key_slot(key)
        assert _keys.key_slot(_keys.wake_key(key)) == _keys.key_slot(key)


def test_periodic_jobs_record_names_scripts_and_due_rule() -> None:
    periodic = source("periodic.rs")
    assert _contract.RECORD_KEY_PREFIX == rust_str(periodic, "RECORD_KEY_PREFIX")
    assert (_contract.STARTED_MS, _contract.FENCE, _contract.RECORD_LABEL, _contract.EXIT) == tuple(
        rust_str(periodic, name) for name in ("STARTED_MS", "FENCE", "LABEL", "EXIT")
    )
    assert _contract.RECORD_RETENTION_MS == rust_const(periodic, "RECORD_RETENTION_MS")
    # The scripts, byte for byte: a record one client writes, the other reads.
    assert _contract.READ_RECORD == rust_str_literal(periodic, "READ")
    assert _contract.WRITE_RECORD == rust_str_literal(periodic, "WRITE")
    # The record's key: the prefix, the key's slot's floor tag, "}:" and the key.
    rule = re.search(r"pub fn record_key\(key: &\[u8\]\) -> Vec<u8> \{(.*?)\n\}", periodic, re.S)
    assert rule and re.findall(r"name\.extend_from_slice\((.*?)\);", rule.group(1)) == [
        "&floor_tag(key_slot(key))", 'b"}:"', "key"
    ], "record_key changed: restate it in fencedlock._keys.record_key"
    examples = re.findall(r'assert_eq!\(record_key\(b"([^"]+)"\), b"([^"]+)"\);', periodic)
    assert examples
    for key, name in examples:
        assert _keys.record_key(key.encode()) == name.encode()
    for key in (b"report", b"lockk", b"{user:7}:nightly", b"a{}b", "r\u00e9sum\u00e9".encode()):
        assert _keys.key_slot(_keys.record_key(key)) == _keys.key_slot(key) and _keys.record_key(key).endswith(key)
    # The due rule, on the Rust unit test's own cases.
    cases = re.findall(
        r"assert_eq!\(reply\(([\d_]+), (None|Some\(\(([\d_]+), [\d_]+\)\))\)\.due\(([\d_]+)\), (Ok\(\(\)\)|Err\(([\d_]+)\))\);",
        periodic,
    )
    assert len(cases) >= 4
    for now, last, started, every, _, wait in cases:
        record = None if last == "None" else _periodic.Record(int(started.replace("_", "")), 5, None, 0)
        reading = _periodic.Reading(int(now.replace("_", "")), record)
        assert reading.due_in_ms(int(every.replace("_", ""))) == (int(wait.replace("_", "")) if wait else 0), (now, last, every)


def test_the_package_exports_one_error_hierarchy() -> None:
    for name in ("InvalidArgument", "NotAcquired", "LeaseLost", "Unavailable", "NoEngine", "ServerError", "BadReply",
                 "BadRecord"):
        assert issubclass(getattr(fencedlock, name), fencedlock.FencedLockError)
    assert issubclass(fencedlock.InvalidArgument, ValueError)
