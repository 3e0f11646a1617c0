"""The site's scripts and the TypeScript client are type-checked (`nox -s lint` runs `tsc`).

Each script in docs/javascripts, and in overrides/ (which a partial inlines), must say
`// @ts-check` in its leading comments: an editor then checks it as it is written, as tsc
does in lint (tests/typecheck/tsconfig.json). A new script without it would be checked by
tsc alone, and silently not by its author's editor.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The site's scripts: those it serves, and those a partial inlines into every page.
SCRIPTS = sorted(
    [*(ROOT / "docs" / "javascripts").glob("*.js"), *(ROOT / "overrides").rglob("*.js")]
)
# Comments (line or block) and blank lines before a file's first statement.
LEADING = re.compile(r"\A(?:\s+|//[^\n]*|/\*.*?\*/)*", re.DOTALL)


def leading_comments(source: str) -> str:
    match = LEADING.match(source)
    assert match is not None  # the pattern matches the empty string
    return match.group(0)


def test_leading_comments_end_at_the_first_statement():
    source = '/* head */\n// @ts-check\n"use strict";\n// @ts-check\n'
    assert leading_comments(source) == "/* head */\n// @ts-check\n"
    assert "@ts-check" not in leading_comments('"use strict";\n// @ts-check\n')


def test_every_site_script_opts_in_to_type_checking():
    assert SCRIPTS, "no scripts in docs/javascripts"
    missing = [
        p.name
        for p in SCRIPTS
        if not re.search(r"^// @ts-check$", leading_comments(p.read_text("utf-8")), re.M)
    ]
    assert missing == [], f"add `// @ts-check` before the first statement of: {missing}"


def test_typescript_is_pinned_once_for_both_checks():
    """One exact TypeScript version for the client and the site's scripts: a range would let
    `npm install` move it, and a new TypeScript finds new things."""
    packages = {f: ROOT / f / "package.json" for f in ("clients/ts", "tests/typecheck")}
    pins = {
        folder: json.loads(path.read_text("utf-8"))["devDependencies"]["typescript"]
        for folder, path in packages.items()
    }
    assert len(set(pins.values())) == 1, pins
    assert all(re.fullmatch(r"\d+\.\d+\.\d+", v) for v in pins.values()), pins
