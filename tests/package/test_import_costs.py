"""What a client of a server imports: no torch.

The benchmark layer measures a server from outside, as a client on another machine
would, and a client does not need a model: the benchmark client, the fake server it is
checked against, and ``llmserve-ref bench --help`` load no torch (and so start in a
fraction of a second, and install without it). Each runs in a fresh interpreter, since
this one imported torch long ago.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

CASES = {
    "the benchmark client": "import llmserve_ref.bench.bench_client",
    "the benchmark harness": "import llmserve_ref.bench.bench_harness",
    "the fake server": (
        "from llmserve_ref.bench.fake_server import FakeConfig, serve_fake\n"
        "with serve_fake(FakeConfig()) as url: pass"
    ),
    "llmserve-ref bench --help": (
        "import contextlib, io\n"
        "from llmserve_ref.cli import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    main(['bench', '--help'])\n"
        "assert '--base-url' in out.getvalue(), out.getvalue()"
    ),
}
PROBE = "{code}\nimport sys\nprint('torch' in sys.modules)"


@pytest.mark.parametrize("code", CASES.values(), ids=CASES.keys())
def test_runs_without_importing_torch(code):
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(code=code)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-1] == "False"


def test_the_probe_sees_torch_when_it_is_imported():
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(code="import llmserve_ref.model.llama")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.stdout.split()[-1] == "True"
