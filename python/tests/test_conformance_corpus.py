"""The command contract's cases, run from their data: every case of
``protocol/corpus/conformance.json`` on three real servers (the module; a managed server with
the Functions library, by ``FCALL``; a managed server where ``FUNCTION`` is denied, by the
library's script and ``EVALSHA``), each step's replies normalised and compared, module vs
functions and module vs script (``protocol/corpus/README.md``, "The contract cases"). The cases
are not copied here: a step, a field or a key form this runner does not know fails the test.

The requests are built by the package's own request builders (:mod:`fencedlock._wire`, keys
from :mod:`fencedlock._keys`): that is what the run proves. Shapes the package never sends
(``CAD``, the ``key_only`` and ``none`` key forms, and words its typed builders would not
write, e.g. arity errors) are built by the README's rule in :func:`by_rule`.

The three servers are started once per protocol (every case has its own key): the cases run in
RESP2 (redis-py before 8) and in RESP3 (its default since), each on fresh servers. One flavor
per run, as ``test_corpus.py`` does: the first of ``FENCEDLOCK_PY_FLAVORS``, Redis 7.0 by
default.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import pytest
import redis
from redis._parsers import _RESP2Parser, _RESP3Parser
from redis.exceptions import ResponseError

from fencedlock import _contract, _data, _keys, _wire
from fencedlock._wire import Engine
from servers import REPO, Server, Servers

CORPUS = REPO / "protocol/corpus/conformance.json"
DATA: Dict[str, Any] = json.loads(CORPUS.read_text("utf-8"))
FLAVOR = (os.environ.get("FENCEDLOCK_PY_FLAVORS") or "redis70").split(",")[0]

SIDES: Dict[str, Engine] = {"module": Engine.MODULE, "functions": Engine.FUNCTIONS, "script": Engine.SCRIPT}
"""Every server of the run by its kind (``servers.Server``), the module (the reference) first."""
LIBRARIES = ("functions", "script")

CORPUS_FIELDS = {"about", "schema", "cases", "differences"}
CASE_FIELDS = {"name", "key", "steps"}
CALL_FIELDS = {"call", "keys", "args", "block_ms"}
DIFFERENCE_FIELDS = {"case", "step", "why"}

PTTL_TOLERANCE_MS = 150
"""How far two pttls taken at nearly the same moment may differ."""
CAD = "FENCEDLOCK.CAD"
LIBRARY_FUNCTIONS: Dict[str, str] = {
    name: _data.text(function) for name, function in _data.CONTRACT["library"]["functions"].items()
}
"""The library function serving each command, ``CAD`` included (the package never sends it)."""
ERROR_TEXTS: Dict[str, str] = {kind["name"]: kind["text"] for kind in _data.CONTRACT["errors"]["kinds"]}

Word = Union[str, bytes, int]


def raw(value: Any) -> bytes:
    """A byte string of the file: text as UTF-8, or ``{"hex": …}``."""
    if isinstance(value, dict) and set(value) == {"hex"}:
        return bytes.fromhex(value["hex"])
    if not isinstance(value, str):
        pytest.fail(f"a byte string was expected, not {value!r}")
    return value.encode("utf-8")


def sent(words: Sequence[Word]) -> List[bytes]:
    """Words as the server receives them: text as UTF-8, integers in decimal."""
    return [w if isinstance(w, bytes) else str(w).encode("utf-8") for w in words]


def shown(words: Sequence[Word]) -> str:
    """A request for a report: long words by their length."""
    out = []
    for word in sent(words):
        out.append(f"<{len(word)} bytes>" if len(word) > 64 else repr(word)[1:])
    return " ".join(out)


# -- the servers -------------------------------------------------------------------------------


def _keep_codes(parser: Any) -> Any:
    """``parser`` keeping an error reply's full text: redis-py's own strips the code (``ERR``
    and others) of the replies it has an exception class for."""

    class WholeErrors(parser):  # type: ignore[misc]
        @classmethod
        def parse_error(cls, response: str) -> ResponseError:
            return ResponseError(response)

    return WholeErrors


PARSERS = {2: _keep_codes(_RESP2Parser), 3: _keep_codes(_RESP3Parser)}


class Conn:
    """One connection of the default user (the application's) to one server, in RESP2 or
    RESP3 (redis-py's default from version 8). Replies as redis-py's reader gives them (no
    command's reply callback), errors raised with their full text."""

    def __init__(self, server: Server, protocol: int = 2) -> None:
        self.server = server
        self.conn = redis.Connection(  # type: ignore[no-untyped-call]
            port=server.port, socket_timeout=10, protocol=protocol, parser_class=PARSERS[protocol]
        )

    def call(self, words: Sequence[Word]) -> Any:
        self.conn.send_command(*words)  # type: ignore[no-untyped-call]
        return self.conn.read_response()

    def close(self) -> None:
        self.conn.disconnect()  # type: ignore[no-untyped-call]


def load_library(conn: Conn, source: str) -> None:
    """``FUNCTION LOAD REPLACE`` by the default user, as the package loads it."""
    assert conn.call(("FUNCTION", "LOAD", "REPLACE", source)) == _contract.LIBRARY_NAME.encode()


@pytest.fixture(scope="module", params=[2, 3], ids=["resp2", "resp3"])
def engines(request: pytest.FixtureRequest) -> Iterator[Dict[str, Conn]]:
    """The three servers, each by its kind: the module; the library by ``FCALL``; the script
    by ``EVALSHA`` (``SCRIPT LOAD`` by the default user, which may not run ``FUNCTION``).
    Fresh ones for each protocol, RESP2 (redis-py before 8) and RESP3 (its default since)."""
    started = Servers(FLAVOR)
    conns: Dict[str, Conn] = {}
    try:
        for kind in SIDES:
            conns[kind] = Conn(started.start(kind), request.param)
        load_library(conns["functions"], _wire.LIBRARY)
        sha = conns["script"].call(("SCRIPT", "LOAD", _wire.SCRIPT)).decode()
        # The package's EVALSHA form names the script by the SHA1 it computes itself.
        assert sha == _wire.SCRIPT_SHA
        yield conns
    finally:
        for conn in conns.values():
            conn.close()
        started.stop_all()


# -- the requests ------------------------------------------------------------------------------


def lock_keys(key: bytes, keys: Any) -> List[bytes]:
    """The lock keys a step's key form names on the case's key."""
    if keys in ("with_floor", "key_only"):
        return [key]
    if keys == "none":
        return []
    if isinstance(keys, dict) and set(keys) == {"member"}:
        return [key + raw(keys["member"])]
    if isinstance(keys, dict) and set(keys) == {"set"}:
        return [key + raw(suffix) for suffix in keys["set"]]
    pytest.fail(f"key form {keys!r} unknown to this runner")


def by_rule(engine: Engine, call: str, keys: Any, locks: List[bytes], args: Sequence[bytes]) -> Tuple[Word, ...]:
    """A request the package has no builder for, by the README's rule: ``CAD`` (the package
    never sends it), the ``key_only`` and ``none`` forms (the package always names the floor
    key where the function takes it), and words the typed builders would not write (arity
    and syntax errors, ``ACQUIREALL`` with ``PERMITS``). The key derivation is the package's
    (``_keys``), the ``FCALL``/``EVALSHA`` framing its ``_wire._library_call``."""
    is_set = isinstance(keys, dict) and "set" in keys
    if engine is Engine.MODULE:
        return (call, len(locks), *locks, *args) if is_set else (call, *locks, *args)
    named = list(locks)
    if is_set:
        named = [*locks, _keys.floor_key(locks[0])] if locks else []
    elif keys != "key_only" and locks:
        if call in _contract.TAKES_WAKE:
            named += [_keys.floor_key(locks[0]), _keys.wake_key(locks[0])]
        elif call in _contract.TAKES_FLOOR:
            named.append(_keys.floor_key(locks[0]))
    return _wire._library_call(engine, LIBRARY_FUNCTIONS[call], named, args)


def _options(words: Sequence[bytes]) -> Optional[Dict[str, Any]]:
    """``ACQUIRE``'s options as the typed builder's arguments, or ``None`` for words it does
    not take (an unknown word, a value that is not an integer)."""
    out: Dict[str, Any] = {}
    i = 0
    while i < len(words):
        word = words[i].decode("utf-8", "replace")
        try:
            if word == _contract.SHARED:
                out["shared"] = True
                i += 1
            elif word == _contract.LABEL and i + 1 < len(words):
                out["label"] = words[i + 1]
                i += 2
            elif word in (_contract.PERMITS, _contract.BLOCK) and i + 1 < len(words):
                out["permits" if word == _contract.PERMITS else "block_ms"] = int(words[i + 1])
                i += 2
            else:
                return None
        except ValueError:
            return None
    return out


def typed(
    engine: Engine, call: str, keys: Any, locks: List[bytes], args: Sequence[bytes]
) -> Optional[Tuple[Word, ...]]:
    """The request from the package's typed builder (``_wire.acquire``, ``_wire.acquire_all``),
    when the step's words are ones it writes: read as its arguments, its module form must be
    the step's words exactly; else ``None``."""
    options = _options(args[2:])
    try:
        ttl = int(args[1]) if len(args) >= 2 else None
    except ValueError:
        ttl = None
    if options is None or ttl is None:
        return None
    token = args[0]
    single = keys == "with_floor" or isinstance(keys, dict) and "member" in keys
    is_set = isinstance(keys, dict) and "set" in keys

    def build(form: Engine) -> Optional[Tuple[Word, ...]]:
        assert options is not None and ttl is not None
        if call == _contract.ACQUIRE and single and not (options.get("shared") and "permits" in options):
            return _wire.acquire(form, locks[0], token, ttl, **options)
        if call == _contract.ACQUIREALL and is_set and set(options) <= {"label"}:
            return _wire.acquire_all(locks, token, ttl, engine=form, **options)
        return None

    module = build(Engine.MODULE)
    if module is None or sent(module) != sent(by_rule(Engine.MODULE, call, keys, locks, args)):
        return None
    return build(engine)


def request(engine: Engine, call: str, keys: Any, locks: List[bytes], args: Sequence[bytes]) -> Tuple[Word, ...]:
    """A step's request in ``engine``'s form, by the package's builders where it has one."""
    if call == CAD or keys in ("key_only", "none"):
        return by_rule(engine, call, keys, locks, args)
    if call in (_contract.ACQUIRE, _contract.ACQUIREALL):
        built = typed(engine, call, keys, locks, args)
        if built is not None:
            return built
    if call != _contract.ACQUIREALL and len(locks) == 1:
        # `with_floor` and `member`: the words after the key as given, by the builder every
        # typed one ends in (the floor key, and the wake-up list, where the function takes them).
        return _wire.command(engine, call, locks[0], args)
    return by_rule(engine, call, keys, locks, args)


# -- the replies -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Norm:
    """A reply as the contract sees it. ``kind``: ``error`` (its full text), ``nil``, ``int``,
    ``fence`` (``(n, None)``: the same as the n-th distinct fence of the case on that server;
    ``(n, above)``: the n-th, new, above every earlier one or not), ``pttl``, ``bytes``,
    ``array`` (a tuple of ``Norm``), ``other`` (a reply the contract never uses)."""

    kind: str
    value: Any = None

    def __repr__(self) -> str:
        if self.kind == "error":
            return f"(error) {self.value}"
        if self.kind == "nil":
            return "nil"
        if self.kind == "fence":
            n, above = self.value
            new = "" if above is None else "(new, above all)" if above else "(new, NOT above all)"
            return f"fence#{n}{new}"
        if self.kind == "pttl":
            return f"pttl {self.value}"
        if self.kind == "array":
            return "[" + ", ".join(map(repr, self.value)) + "]"
        if self.kind == "other":
            return f"other {self.value}"
        return repr(self.value)

    def agrees(self, other: Norm) -> bool:
        """Equal, pttls within the tolerance; a reply of another type never agrees."""
        if self.kind == "other" or other.kind == "other" or self.kind != other.kind:
            return False
        if self.kind == "pttl":
            a, b = self.value, other.value
            return bool(a == b if a < 0 or b < 0 else abs(a - b) <= PTTL_TOLERANCE_MS)
        if self.kind == "array":
            return len(self.value) == len(other.value) and all(x.agrees(y) for x, y in zip(self.value, other.value))
        return bool(self.value == other.value)


NIL = Norm("nil")


@dataclass
class Fences:
    """The fences one server replied in one case, in order."""

    seen: List[int] = field(default_factory=list)

    def relate(self, fence: int) -> Norm:
        if fence in self.seen:
            return Norm("fence", (self.seen.index(fence), None))
        above = all(fence > f for f in self.seen)
        self.seen.append(fence)
        return Norm("fence", (len(self.seen) - 1, above))

    def highest(self) -> int:
        if not self.seen:
            pytest.fail("fence_plus before any fence was replied")
        return max(self.seen)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def plain(value: Any) -> Norm:
    """A value compared as it is. redis-py's readers give simple, bulk and (RESP3) verbatim
    strings alike as bytes, and RESP3 sets as lists; no reply of the contract is one of these
    but a bulk string or an array. Any other type (a RESP3 map, double or boolean) never agrees."""
    if value is None:
        return NIL
    if isinstance(value, ResponseError):
        return Norm("error", str(value))
    if _is_int(value):
        return Norm("int", value)
    if isinstance(value, bytes):
        return Norm("bytes", value)
    if isinstance(value, list):
        return Norm("array", tuple(plain(v) for v in value))
    return Norm("other", repr(value))


def _status(items: List[Any], fences: Fences) -> Norm:
    """``[fence, held, pttl, label?]`` or ``[fence, holders, permits, [[fence, pttl, label|nil]…]]``."""
    semaphore = len(items) > 3 and isinstance(items[3], list)
    out = []
    for i, item in enumerate(items):
        if i == 0 and _is_int(item):
            out.append(fences.relate(item))
        elif i == 2 and _is_int(item) and not semaphore:
            out.append(Norm("pttl", item))
        elif i == 3 and semaphore:
            entries = []
            for entry in item:
                if not isinstance(entry, list):
                    entries.append(plain(entry))
                    continue
                parts = []
                for j, part in enumerate(entry):
                    if j == 0 and _is_int(part):
                        parts.append(fences.relate(part))
                    elif j == 1 and _is_int(part):
                        parts.append(Norm("pttl", part))
                    else:
                        parts.append(plain(part))
                entries.append(Norm("array", tuple(parts)))
            out.append(Norm("array", tuple(entries)))
        else:
            out.append(plain(item))
    return Norm("array", tuple(out))


def normalise(call: str, value: Any, fences: Fences) -> Norm:
    """A reply of ``call``: which positions hold fences and pttls is the command's."""
    if _is_int(value) and call in (_contract.ACQUIRE, _contract.RAISE):
        return fences.relate(value)
    if isinstance(value, list) and call == _contract.ACQUIREALL:
        return Norm("array", tuple(fences.relate(v) if _is_int(v) else plain(v) for v in value))
    if isinstance(value, list) and call == _contract.STATUS:
        return _status(value, fences)
    return plain(value)


@dataclass(frozen=True)
class Outcome:
    """One server's reply to one request, and whether it waited (for a step with
    ``block_ms``: the reply took at least ¾ of it)."""

    reply: Norm
    waited: Optional[bool] = None

    def agrees(self, other: Outcome) -> bool:
        return self.waited == other.waited and self.reply.agrees(other.reply)

    def __str__(self) -> str:
        return f"{self.reply!r}" + {None: "", True: " (waited)", False: " (at once)"}[self.waited]


def send(conn: Conn, words: Sequence[Word], call: str, fences: Fences, block_ms: Optional[int]) -> Outcome:
    started = time.monotonic()
    try:
        reply = normalise(call, conn.call(words), fences)
    except ResponseError as exc:
        reply = Norm("error", str(exc))
    except redis.RedisError as exc:
        reply = Norm("other", f"client error: {exc!r}")
    took = time.monotonic() - started
    return Outcome(reply, None if block_ms is None else took * 1000 >= block_ms * 3 / 4)


# -- the cases ---------------------------------------------------------------------------------


@dataclass
class Disagreement:
    case: str
    step: int
    library: str
    requests: Dict[str, str]
    module: Outcome
    other: Outcome

    def __str__(self) -> str:
        return (
            f"{self.case} step {self.step}:\n"
            f"    module request:    {self.requests['module']}\n"
            f"    {self.library} request: {self.requests[self.library]}\n"
            f"    module:    {self.module}\n"
            f"    {self.library + ':':<10} {self.other}"
        )


def resolve(args: Sequence[Any], key: bytes, fences: Fences) -> List[bytes]:
    """A step's arguments for one server (a fence relative to that server's own)."""
    out = []
    for arg in args:
        if arg == {"key": True}:
            out.append(key)
        elif isinstance(arg, dict) and set(arg) == {"fence_plus"}:
            out.append(str(fences.highest() + int(arg["fence_plus"])).encode())
        else:
            out.append(raw(arg))
    return out


def run_case(engines: Dict[str, Conn], case: Dict[str, Any]) -> List[Disagreement]:
    """Every step of ``case``, each to the module first and then to each library server;
    the steps where a library server's reply does not agree with the module's."""
    unknown = set(case) - CASE_FIELDS
    if unknown:
        pytest.fail(f"{case.get('name')}: case fields this runner does not know: {sorted(unknown)}")
    name, key = case["name"], raw(case["key"])
    fences = {side: Fences() for side in engines}
    libraries = [side for side in engines if side != "module"]
    out = []
    for i, step in enumerate(case["steps"]):
        if set(step) == {"sleep_ms"}:
            time.sleep(step["sleep_ms"] / 1000)
        elif set(step) == {"raw"}:
            setup = resolve(step["raw"], key, fences["module"])
            for side, conn in engines.items():
                try:
                    conn.call(setup)
                except redis.RedisError as exc:
                    pytest.fail(f"{name} step {i}: set-up {shown(setup)} failed on {side}: {exc}")
        elif "call" in step and set(step) <= CALL_FIELDS and {"keys", "args"} <= set(step):
            call, keys, block_ms = step["call"], step["keys"], step.get("block_ms")
            if call not in LIBRARY_FUNCTIONS:
                pytest.fail(f"{name} step {i}: command {call!r} unknown to this runner")
            locks = lock_keys(key, keys)
            outcomes: Dict[str, Outcome] = {}
            requests: Dict[str, str] = {}
            for side, conn in engines.items():
                words = request(SIDES[side], call, keys, locks, resolve(step["args"], key, fences[side]))
                requests[side] = f"{shown(words)}  ({json.dumps(keys)})"
                outcomes[side] = send(conn, words, call, fences[side], block_ms)
            for library in libraries:
                if not outcomes["module"].agrees(outcomes[library]):
                    out.append(Disagreement(name, i, library, requests, outcomes["module"], outcomes[library]))
        else:
            pytest.fail(f"{name} step {i}: a step this runner does not know: {step}")
    return out


def _raise_above_safe(module: Outcome, library: Outcome) -> bool:
    """The module raises (its bound is 2^63 - 1); the library, whose numbers are doubles,
    replies the module's ``FencesExhausted`` text."""
    fence = module.reply.value if module.reply.kind == "fence" else None
    return (
        fence is not None
        and fence[1] is True
        and library.reply == Norm("error", ERROR_TEXTS["FencesExhausted"])
        and module.waited is None is library.waited
    )


def _block_busy(module: Outcome, library: Outcome) -> bool:
    """The module replies nil after waiting; a script cannot block, so nil at once."""
    return module.reply == NIL and module.waited is True and library.reply == NIL and library.waited is False


EXPECTED_RULES: Dict[str, Callable[[Outcome, Outcome], bool]] = {
    "raise:above-2^53": _raise_above_safe,
    "block:busy-key": _block_busy,
}
"""How each expected difference of the corpus looks (module, library), by case name."""
EXPECTED: Dict[Tuple[str, int], Callable[[Outcome, Outcome], bool]] = {
    (d["case"], d["step"]): EXPECTED_RULES.get(d["case"], lambda m, o: False) for d in DATA["differences"]
}


def test_the_corpus_is_one_this_runner_reads() -> None:
    assert DATA["schema"] == 1
    assert set(DATA) == CORPUS_FIELDS, f"corpus fields this runner does not know: {set(DATA) - CORPUS_FIELDS}"
    names = [case["name"] for case in DATA["cases"]]
    assert len(set(names)) == len(names), "case names are unique (each case has its own key)"
    keys = [raw(case["key"]) for case in DATA["cases"]]
    assert len(set(keys)) == len(keys), "each case has its own key"
    by_name = {case["name"]: case for case in DATA["cases"]}
    for difference in DATA["differences"]:
        assert set(difference) == DIFFERENCE_FIELDS, difference
        assert difference["case"] in EXPECTED_RULES, f"an expected difference this runner does not know: {difference}"
        assert 0 <= difference["step"] < len(by_name[difference["case"]]["steps"]), difference


def check(engines: Dict[str, Conn], case: Dict[str, Any]) -> List[str]:
    """The failures of one case: unexpected disagreements, and expected ones not seen."""
    problems = []
    seen = set()
    for d in run_case(engines, case):
        rule = EXPECTED.get((d.case, d.step))
        if rule is not None and rule(d.module, d.other):
            seen.add((d.step, d.library))
        else:
            problems.append(str(d))
    for (name, step), _ in EXPECTED.items():
        for library in LIBRARIES:
            if name == case["name"] and (step, library) not in seen:
                problems.append(
                    f"{name} step {step}: the expected difference was not seen on {library} (the step agreed, "
                    "or differed otherwise)"
                )
    return problems


@pytest.mark.parametrize("case", DATA["cases"], ids=[case["name"] for case in DATA["cases"]])
def test_case(engines: Dict[str, Conn], case: Dict[str, Any]) -> None:
    problems = check(engines, case)
    assert not problems, "the engines differ where no difference is listed:\n" + "\n".join(problems)


def test_a_library_with_one_broken_error_text_is_caught() -> None:
    """The comparison can fail: a library whose ttl error text lost one word is caught on
    the cases that send a bad ttl, with both texts in the report."""
    good = ERROR_TEXTS["BadTtl"]
    broken_text = good.replace("positive ", "", 1)
    broken = _wire.LIBRARY.replace(f"'{good}'", f"'{broken_text}'", 1)
    assert broken != _wire.LIBRARY, "the library carries the ttl error text"
    cases = [case for case in DATA["cases"] if case["name"].startswith("ttl:bad-0")]
    assert cases
    started = Servers(FLAVOR)
    conns: Dict[str, Conn] = {}
    try:
        conns = {kind: Conn(started.start(kind)) for kind in ("module", "functions")}
        load_library(conns["functions"], broken)
        found = [d for case in cases for d in run_case(conns, case) if d.library == "functions"]
    finally:
        for conn in conns.values():
            conn.close()
        started.stop_all()
    text = "\n".join(map(str, found))
    assert found, "a broken error text went unnoticed"
    assert good in text and broken_text in text, text
