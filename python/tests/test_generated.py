"""The sync package's generated modules are those ``scripts/unasync.py`` makes from their
asyncio sources now: CI fails on a source edited without running the generator (or on a
generated file edited by hand)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import unasync

SCRIPT = Path(unasync.__file__)


def test_the_generated_sync_modules_are_fresh() -> None:
    checked = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr


def test_the_check_names_a_stale_file(tmp_path: Path) -> None:
    """A generated file that differs from what its source makes is named, and nothing is
    written (run on a copy of the package, not the checkout)."""
    package = tmp_path / "fencedlock"
    (package / "asyncio").mkdir(parents=True)
    name = unasync.MODULES[0]
    source = (unasync.PACKAGE / "asyncio" / f"{name}.py").read_text()
    (package / "asyncio" / f"{name}.py").write_text(source)
    stale = "# edited by hand\n" + unasync.generate(name, source)
    (package / f"{name}.py").write_text(stale)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(unasync, "PACKAGE", package)
        patch.setattr(unasync, "MODULES", (name,))
        assert unasync.main(["--check"]) == 1
        assert (package / f"{name}.py").read_text() == stale
        assert unasync.main([]) == 0 and unasync.main(["--check"]) == 0
    assert (package / f"{name}.py").read_text() == unasync.generate(name, source)


def test_the_rewrites() -> None:
    source = (
        "from typing import AsyncIterator, Awaitable, Callable, Iterator\n"
        "import redis.asyncio\n"
        "from .. import _terms\n"
        "from . import _backend\n"
        "async def f(g: Callable[[], Awaitable[Optional[List[int]]]]) -> AsyncIterator[int]:\n"
        "    async with x:\n"
        "        await g()\n"
        "    await self.__aexit__(None)\n"
    )
    assert unasync.generate("m", source).splitlines()[1:] == [
        "from typing import Callable, Iterator",
        "import redis",
        "from . import _terms",
        "from . import _backend",
        "def f(g: Callable[[], Optional[List[int]]]) -> Iterator[int]:",
        "    with x:",
        "        g()",
        "    self.__exit__(None)",
    ]
