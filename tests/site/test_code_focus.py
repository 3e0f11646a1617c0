"""hooks/code_focus.py: its examples (the built pages are checked in Chromium, where axe-core
finds a scrolling block that Tab cannot reach: tests/site/test_browser.py)."""

from __future__ import annotations

import doctest
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "hooks"))

import code_focus


def test_its_examples():
    assert doctest.testmod(code_focus).failed == 0
