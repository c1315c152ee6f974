"""Writes the sync package from its asyncio source: ``fencedlock/asyncio/X.py`` is the one
hand-written copy of each module in :data:`MODULES`, and ``fencedlock/X.py`` is generated from
it by a fixed map of textual rewrites (``async def`` → ``def``, ``await x`` → ``x``,
``redis.asyncio`` → ``redis``, ``from ..`` → ``from .``, ...). What truly differs between the two
(tasks or threads, ``asyncio.Event`` or ``threading.Event``, ``gather`` or a thread pool) is in
the two hand-written ``_backend`` modules, imported by the same name on both sides.

Run ``python scripts/unasync.py`` after editing a source; ``--check`` writes nothing and exits
1 naming every generated file that is stale (``tests/test_generated.py`` runs it, so CI fails
on a stale file). The generated files are committed: ``pip install`` of a checkout needs no
step of its own.

Own script rather than PyPI's ``unasync``: that one rewrites names token by token, so neither
``Awaitable[T]`` → ``T`` nor the relative imports one package level up, which are most of
what this package needs; a fixed map of a dozen rules is easier to review than its
configuration."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Callable, List, Tuple, Union

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "fencedlock"

MODULES = ("_give_back", "_server", "election", "lease", "locker", "multi", "periodic", "read_write", "redlock")
"""The modules of ``fencedlock/asyncio`` the sync package's are generated from."""

HEADER = "# Generated from fencedlock/asyncio/{name}.py by python/scripts/unasync.py: do not edit.\n"

Rule = Tuple[str, Union[str, Callable[["re.Match[str]"], str]]]

RULES: List[Rule] = [
    (r"\basync (def|with|for) ", r"\1 "),
    (r"\bawait ", ""),
    (r"\b__a(enter|exit|iter)__\b", r"__\1__"),
    (r"\b__anext__\b", "__next__"),
    (r"\bAsync(Iterator|Iterable|Generator|ContextManager)\b", r"\1"),
    (r"\basynccontextmanager\b", "contextmanager"),
    (r"\bredis\.asyncio\b", "redis"),
    (r"\bfencedlock\.asyncio\b", "fencedlock"),
    (r"\bcheck_async\b", "check_sync"),
    (r"``asyncio\.Event``", "``threading.Event``"),
    # One package level up: ``from ..x import`` in fencedlock/asyncio is ``from .x import``.
    (r"(?m)^(\s*)from \.\.", r"\1from ."),
]
"""Each pattern and its replacement, applied in order to the whole text (docstrings too)."""


def strip_awaitable(text: str) -> str:
    """``Awaitable[X]`` → ``X``, for an ``X`` that may itself hold brackets."""
    out, start = [], 0
    for found in re.finditer(r"\bAwaitable\[", text):
        if found.start() < start:
            continue
        depth, end = 1, found.end()
        while depth:
            depth += {"[": 1, "]": -1}.get(text[end], 0)
            end += 1
        out.append(text[start:found.start()])
        out.append(strip_awaitable(text[found.end():end - 1]))
        start = end
    return "".join(out) + text[start:]


def unwrap_awaited(text: str) -> str:
    """``(await x.f()).g`` → ``x.f().g``: the parentheses only the ``await`` needed."""
    out, start = [], 0
    for found in re.finditer(r"\(await ", text):
        if found.start() < start:
            continue
        depth, end = 1, found.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            end += 1
        if text[end:end + 1] != ".":
            continue
        out.append(text[start:found.start()])
        out.append(unwrap_awaited(text[found.end():end - 1]))
        start = end
    return "".join(out) + text[start:]


def tidy_typing_imports(text: str) -> str:
    """``from typing import`` lines without ``Awaitable`` and without the names that became
    duplicates (``AsyncIterator, Iterator``), sorted."""

    def tidy(line: "re.Match[str]") -> str:
        names = sorted({name.strip() for name in line.group(1).split(",")} - {"Awaitable", ""})
        return f"from typing import {', '.join(names)}"

    return re.sub(r"(?m)^from typing import ([^\n(]+)$", tidy, text)


def generate(name: str, source: str) -> str:
    """The sync module generated from the asyncio module ``name``'s ``source``."""
    text = unwrap_awaited(strip_awaitable(source))
    for pattern, replacement in RULES:
        text = re.sub(pattern, replacement, text)
    return HEADER.format(name=name) + tidy_typing_imports(text)


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each stale file")
    check = parser.parse_args(argv).check
    stale = []
    for name in MODULES:
        wanted = generate(name, (PACKAGE / "asyncio" / f"{name}.py").read_text())
        target = PACKAGE / f"{name}.py"
        if target.exists() and target.read_text() == wanted:
            continue
        stale.append(target)
        if not check:
            target.write_text(wanted)
    for target in stale:
        verb = "stale (run python/scripts/unasync.py)" if check else "written"
        print(f"{target.relative_to(PACKAGE.parents[1])}: {verb}", file=sys.stderr if check else sys.stdout)
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
