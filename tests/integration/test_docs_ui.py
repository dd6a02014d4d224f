"""/docs renders with no network: headless Chromium loads it from a real set on 127.0.0.1
with every other host unreachable, runs Swagger UI (which builds the operation list in the
browser, so the list is there only if the gateway served the scripts), and the DOM shows
the operations. Chromium is Debian's package (`bash hack/tools.sh chromium`, part of `make
tools`). The screenshot is kept in the test's tmp dir."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.cluster import ProcessSet

pytestmark = pytest.mark.slow

#: Nothing but 127.0.0.1 resolves, and anything not bypassed goes to a proxy that is not
#: there: with both, no request can leave the machine.
OFFLINE = [
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--proxy-server=http://127.0.0.1:9",
    "--proxy-bypass-list=127.0.0.1",
]
OPERATION = re.compile(r'opblock-summary-method">(\w+)</span>.*?data-path="([^"]+)"', re.S)


def chromium(profile: Path, *args: str) -> str:
    binary = shutil.which("chromium")
    assert binary, "chromium is not installed: bash hack/tools.sh chromium"
    done = subprocess.run(
        [
            binary,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={profile}",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-extensions",
            "--disable-sync",
            *OFFLINE,
            # Run the page's scripts for up to 10 s of virtual time before dumping.
            "--virtual-time-budget=10000",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_browser_here_cannot_reach_another_host(tmp_path: Path) -> None:
    """The control: under the same flags a script from a CDN does not load."""
    page = (
        "data:text/html,<title>waiting</title><script "
        'src="https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui-bundle.js" '
        "onload=\"document.title='loaded'\" onerror=\"document.title='blocked'\"></script>"
    )
    assert "<title>blocked</title>" in chromium(tmp_path / "profile", "--dump-dom", page)


def test_docs_render_the_operations_with_no_network(weasel: ProcessSet, tmp_path: Path) -> None:
    dom = chromium(tmp_path / "profile", "--dump-dom", f"{weasel.url}/docs")
    operations = set(OPERATION.findall(dom))
    assert {("POST", "/v1/commit"), ("GET", "/v1/subscribe"), ("GET", "/v1/version")} <= (
        operations
    ), dom[-3000:]
    shot = tmp_path / "docs.png"
    chromium(
        tmp_path / "profile",
        "--window-size=1280,2400",
        f"--screenshot={shot}",
        f"{weasel.url}/docs",
    )
    # A blank page of that size compresses to a few kB; the rendered one is ~170 kB.
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
