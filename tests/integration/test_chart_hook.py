"""The chart's `helm test` Pod (charts/weaseldb/templates/tests/commit.yaml) runs a shell
script with the `weaseldb` command of the image: here that same script, read from the
template, runs against a real set, so the hook's commit and read-back are known to work
without a Kubernetes cluster (the kind tier runs it as a Pod)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.cluster import ProcessSet

pytestmark = pytest.mark.slow

TEMPLATE = Path(__file__).resolve().parents[2] / "charts/weaseldb/templates/tests/commit.yaml"


def hook_script() -> str:
    """The container's script: no Helm expression is in it, so the template is YAML once
    its comment and every line with a directive are dropped."""
    text = re.sub(r"\{\{- /\*.*?\*/ -\}\}", "", TEMPLATE.read_text(), flags=re.S)
    lines = [line for line in text.splitlines() if "{{" not in line]
    pod = yaml.safe_load("\n".join(lines))
    command: list[str] = pod["spec"]["containers"][0]["command"]
    assert command[:2] == ["sh", "-ec"]
    return command[2]


def test_the_helm_test_script_commits_and_reads_back(weasel: ProcessSet, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "WEASELDB_URL": weasel.url,
        "TMPDIR": str(tmp_path),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    result = subprocess.run(
        ["sh", "-ec", hook_script()], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "read back at version" in result.stdout
    assert (tmp_path / "seen").read_text().startswith("PUT\nhelm-test/")
