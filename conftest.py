"""Collect the pages' examples and the package's doctests (see tests/pages.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "tests"))

from pages import page_sybil, source_sybil

pytest_collect_file = (page_sybil() + source_sybil()).pytest()
