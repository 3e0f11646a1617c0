"""Sessions: tests(device) for cpu|mps|cuda, docs (strict build), serve, lint, bench.

python3 -m pip install nox
nox -s tests                        # every device present; absent ones skip in one line
nox -s "tests(device='cuda')" -- --force-device   # absent device = failure, not skip
nox -s docs serve lint
"""

from __future__ import annotations

import os
import platform
import shutil
import sys

import nox

nox.options.sessions = ["tests", "docs", "lint"]
nox.options.reuse_existing_virtualenvs = True

# pip takes this CPU build from local disk on our build machine and the matching CUDA or
# macOS build elsewhere; any other spec may pull a multi-GB CUDA build.
TORCH = "torch==2.13.0"
ENV = {"NO_MKDOCS_2_WARNING": "1", "PYTHONHASHSEED": "0"}


def install(session: nox.Session, extras: str) -> None:
    session.install(TORCH)
    session.install("-e", f".[{extras}]")


def device_missing(session: nox.Session, device: str, force: bool) -> None:
    message = f"no {device} device on this machine; tests(device='{device}') not run"
    if force:
        session.error(f"{message} (--force-device / LLMSERVE_FORCE_DEVICE=1 asked for it)")
    session.skip(message)


def plausible(device: str) -> bool:
    """A quick look before installing anything (torch confirms after)."""
    if device == "mps":
        return sys.platform == "darwin" and platform.machine() == "arm64"
    if device == "cuda":
        return shutil.which("nvidia-smi") is not None
    return True


@nox.session
@nox.parametrize("device", ["cpu", "mps", "cuda"])
def tests(session: nox.Session, device: str) -> None:
    """The whole suite on one device: package tests, every page example, snippets, browser."""
    force = "--force-device" in session.posargs or os.environ.get("LLMSERVE_FORCE_DEVICE") == "1"
    args = [a for a in session.posargs if a != "--force-device"]
    if not plausible(device):
        device_missing(session, device, force)
    install(session, "tests")
    check = f"import llmserve_ref.device as d; print(d.available('{device}'))"
    if session.run("python", "-c", check, silent=True).strip() != "True":
        device_missing(session, device, force)
    if shutil.which("npm"):  # the TypeScript client's test runs it with the official package
        session.run("npm", "ci", "--prefix", "clients/ts", "--no-audit", "--no-fund", external=True)
    env = {**ENV, "LLMSERVE_DEVICE": device}
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"  # Triton kernels run in its interpreter on the CPU
    session.run("pytest", *args, env=env)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks: each prints ratios measured side by side in one run (never a unit test)."""
    install(session, "tests")
    device = session.run(
        "python", "-c", "import llmserve_ref.device as d; print(d.best_device())", silent=True
    ).strip()
    env = {**ENV, "LLMSERVE_DEVICE": device}
    for script in ["kv_cache", "hardware", "speculative", "simulator", "server_overhead"]:
        session.run("python", f"benchmarks/{script}.py", env=env)
    if device == "cuda":
        session.run(
            "python", "benchmarks/flash_attention_cuda.py", "--out", "benchmarks/results", env=env
        )
    else:  # no GPU: the Triton kernels' correctness in the interpreter, against SDPA
        session.log("no CUDA device: FlashAttention TFLOP/s not measured; interpreter check:")
        session.run(
            "pytest",
            "-q",
            "tests/test_triton_attention.py",
            env={**env, "LLMSERVE_DEVICE": "cpu", "TRITON_INTERPRET": "1"},
        )


@nox.session
def docs(session: nox.Session) -> None:
    """Build the site with warnings as errors."""
    install(session, "docs")
    session.run("mkdocs", "build", "--strict", *session.posargs, env=ENV)


@nox.session
def serve(session: nox.Session) -> None:
    """Build and serve the site on http://127.0.0.1:8000, rebuilding on changes."""
    install(session, "docs")
    session.run("mkdocs", "serve", "--dev-addr", "127.0.0.1:8000", *session.posargs, env=ENV)


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run(
        "ruff", "check", "src", "tests", "snippets", "docs", "hooks", "noxfile.py", "conftest.py"
    )
