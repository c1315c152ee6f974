"""The front page's Python example (``README.md``, the block marked ``<!-- example: python -->``),
run as a user pastes it: in an interpreter of its own, against a real server, on every engine.
Only its server URL is pointed at the test's server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

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
