"""The front page's Python example (``README.md``, the block marked ``<!-- example: python -->``),
run as a user pastes it: in an interpreter of its own, against a real server, on every engine.
Only its server URL is pointed at the test's server. Then the package page's examples of
several keys and periodic jobs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

from fencedlock import Locker, LockStatus
from servers import Server

REPO = Path(__file__).resolve().parents[2]
FRONT_PAGE = REPO / "README.md"
MARKER = "<!-- example: python -->"
FRONT_PAGE_URL = "redis://127.0.0.1:6379"
"""The server the example names: the one ``scripts/run-server`` starts."""
KEY = "nightly-report"
"""The key the example leases."""


def front_page_example() -> str:
    page = FRONT_PAGE.read_text()
    found = re.search(re.escape(MARKER) + r"\n```python\n(.*?)```", page, re.S)
    assert found, f"{FRONT_PAGE} has no ```python block marked {MARKER}"
    return found.group(1)


def test_the_front_page_example_prints_its_fence_and_releases(server: Server) -> None:
    code = front_page_example()
    assert f'"{FRONT_PAGE_URL}"' in code, f"the example no longer names {FRONT_PAGE_URL}:\n{code}"
    code = code.replace(FRONT_PAGE_URL, f"redis://127.0.0.1:{server.port}")
    env = {**os.environ, "PYTHONPATH": str(REPO / "python" / "src")}
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert ran.returncode == 0, ran.stderr
    fences = re.findall(r"^report built with fence (\d+)$", ran.stdout, re.M)
    assert len(fences) == 1 and int(fences[0]) > 0, ran.stdout
    status = Locker(server.client()).status(KEY)
    assert isinstance(status, LockStatus), status
    assert status.fence == int(fences[0]) and not status.held, status


PACKAGE_PAGE = REPO / "python" / "README.md"


@pytest.mark.engines("functions")
def test_the_package_pages_several_keys_and_periodic_examples_run(server: Server) -> None:
    """``python/README.md``'s blocks under "Several keys at once" and "Periodic jobs", run
    against a real server with the page's ``locker`` and stand-ins for the application's
    own functions; the periodic block a second time finds the job not due."""
    page = PACKAGE_PAGE.read_text()
    section = page[page.index("## Several keys at once"):page.index("## asyncio")]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 3, "the sections' examples changed: update this test"
    printed: List[str] = []
    names: Dict[str, Any] = {
        "locker": Locker(server.client(), ttl=30),
        "print": lambda *args: printed.append(" ".join(map(str, args))),
        "transfer": lambda *fences: None,
        "move": lambda *fences: None,
        "sync": lambda fence: 7,
        "run_job": lambda fence: 0,
    }
    for block in [*blocks, blocks[1]]:
        exec(block, names)
    assert printed[0] == "synced 7 rows" and printed[1].startswith("ran 0 s ago"), printed
    assert Locker(server.client()).acquire_all(["account:1", "account:2", "nightly-sync"]) is not None, "all released"
