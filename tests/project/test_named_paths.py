"""Every test file the prose names exists: pages, README, CONTRIBUTING, docstrings, claims.

The tests moved once (they mirror the package now); a sentence that sends a reader to a
test file by its old path is a stale sentence, and nothing else would catch it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAMED = re.compile(r"\btests/[\w/]*?test_\w+\.py\b|\btests/[\w]+/(?=[`\s)])")
PROSE = ("*.md", "*.py", "*.yml", "*.toml", "*.js", "*.ts", "*.css", "*.json", ".ci/run")


def named_paths() -> dict[str, set[str]]:
    """Test paths named in the repository's tracked and new files, by the file naming them."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", *PROSE],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    found: dict[str, set[str]] = {}
    for name in listed:
        path = ROOT / name
        skip = name.startswith(("recordings/", "site/")) or path == Path(__file__).resolve()
        if skip or not path.is_file():
            continue
        for match in NAMED.findall(path.read_text(encoding="utf-8", errors="replace")):
            found.setdefault(match, set()).add(name)
    return found


def test_every_named_test_path_exists():
    paths = named_paths()
    assert "tests/peers/test_greedy_vs_vllm.py" in paths  # pages do name test files
    missing = {p: sorted(where) for p, where in paths.items() if not (ROOT / p).exists()}
    assert missing == {}, f"named but not there (moved? renamed?): {missing}"
