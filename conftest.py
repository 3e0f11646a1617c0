"""Collect the pages' examples and the package's doctests (see tests/pages.py).

``--record-outputs`` writes what every page block printed to recordings/ (for the device
the run is on), which the site shows under each block; without it, the run checks that
every block that prints has a current recording.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "tests"))

from pages import RECORDER, page_sybil, source_sybil

pytest_collect_file = (page_sybil() + source_sybil()).pytest()


def pytest_addoption(parser):
    parser.addoption(
        "--record-outputs",
        action="store_true",
        help="record what each page block prints into recordings/ (see hooks/recorded_outputs.py)",
    )


def pytest_configure(config):
    RECORDER.record = config.getoption("--record-outputs")


def pytest_sessionfinish(session, exitstatus):
    if RECORDER.record:
        RECORDER.save()
