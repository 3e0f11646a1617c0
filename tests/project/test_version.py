"""The package's version names its content: the release and a hash of the package's files,
the same wherever the files are (a source tree, the copy a wheel is built from, an installed
wheel), and different as soon as one file is. tests/site/test_wheel.py checks it on a real
wheel; these check the hash itself, cheaply."""

from __future__ import annotations

import re
import shutil

import llmserve_ref
from llmserve_ref import PACKAGE_DIR, RELEASE, package_hash


def test_the_version_is_the_release_and_the_content_hash():
    assert re.fullmatch(r"\d+\.\d+\.\d+\+g[0-9a-f]{12}", llmserve_ref.__version__)
    assert llmserve_ref.__version__ == f"{RELEASE}+g{package_hash()[:12]}"


def test_a_copy_hashes_the_same_and_one_changed_byte_does_not(tmp_path):
    copy = tmp_path / "llmserve_ref"
    shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert package_hash(copy) == package_hash(PACKAGE_DIR)
    (copy / "__pycache__").mkdir(exist_ok=True)
    (copy / "__pycache__" / "stale.cpython-311.pyc").write_bytes(b"\0")
    assert package_hash(copy) == package_hash(PACKAGE_DIR)  # compiled files do not count
    module = copy / "device.py"
    module.write_text(module.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    assert package_hash(copy) != package_hash(PACKAGE_DIR)
