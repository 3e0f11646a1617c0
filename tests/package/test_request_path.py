"""One streamed chat request can be followed through the package without doubling back.

A profile hook records, for every call into the package while one streamed chat request
is served by an in-process server (its engine core on a thread, so every thread the
request crosses is traced), the stack of package files above it, consecutive repeats
collapsed. On its way in (HTTP handler, parsing, limits, engine, scheduler, model) and
on its way out (sampler, output processor, stream, chunk), a request passes through each
file at most once on any such path: no module calls into another that calls back into
it, so a reader who follows the calls never returns to a file they have left.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import httpx

import llmserve_ref
from llmserve_ref.engine.batched_engine import BatchedEngine
from llmserve_ref.serving.launcher import serve_in_thread

PACKAGE = str(Path(llmserve_ref.__file__).parent) + "/"
BODY = {
    "model": "tiny",
    "messages": [{"role": "user", "content": "Tell me a story."}],
    "max_tokens": 4,
    "temperature": 0,
    "stream": True,
}


class Trace:
    """The package call paths seen while `active`: each a tuple of files, outermost first."""

    def __init__(self) -> None:
        self.active = False
        self.paths: set[tuple[str, ...]] = set()
        self.files: set[str] = set()

    def hook(self, frame: FrameType, event: str, arg: object) -> None:
        if event != "call" or not self.active or not frame.f_code.co_filename.startswith(PACKAGE):
            return
        path: list[str] = []
        f: FrameType | None = frame
        while f is not None:
            name = f.f_code.co_filename
            if name.startswith(PACKAGE) and (not path or path[-1] != name[len(PACKAGE) :]):
                path.append(name[len(PACKAGE) :])
            f = f.f_back
        self.paths.add(tuple(reversed(path)))
        self.files.update(path)


@contextmanager
def traced() -> Iterator[Trace]:
    """Trace every thread started inside the block, and this one."""
    trace = Trace()
    threading.setprofile(trace.hook)
    sys.setprofile(trace.hook)
    try:
        yield trace
    finally:
        sys.setprofile(None)
        threading.setprofile(None)


def doubled_back(paths: set[tuple[str, ...]]) -> list[tuple[str, ...]]:
    return sorted(p for p in paths if len(set(p)) < len(p))


def test_a_streamed_chat_request_passes_each_file_once_on_any_path():
    with traced() as trace:
        engine = BatchedEngine.load("tiny", device="cpu", separate_process=False)
        try:
            with serve_in_thread("tiny", engine=engine) as server:
                url = f"{server.base_url}/chat/completions"
                httpx.post(url, json=BODY, timeout=60).raise_for_status()  # warm: imports done
                trace.active = True
                with httpx.stream("POST", url, json=BODY, timeout=60) as response:
                    chunks = [line for line in response.iter_lines() if line.startswith("data:")]
                trace.active = False
        finally:
            engine.close()
    assert chunks[-1] == "data: [DONE]" and len(chunks) >= 4
    on_the_way = {
        "serving/app.py", "serving/handlers.py", "serving/openai_parsing.py",
        "serving/limits.py", "serving/openai_requests.py", "engine/batched_engine.py",
        "engine/core_worker.py", "engine/engine_core.py", "engine/scheduler.py",
        "engine/block_manager.py", "engine/model_runner.py", "engine/paged_batch.py",
        "model/llama.py", "engine/output_processor.py", "model/detokenizer.py",
        "engine/interface.py", "serving/streams.py", "serving/openai_responses.py",
    }  # fmt: skip
    assert on_the_way <= trace.files, f"not traced: {sorted(on_the_way - trace.files)}"
    assert doubled_back(trace.paths) == []


def test_the_check_sees_a_callback():
    paths = {("a.py", "b.py"), ("a.py", "b.py", "a.py", "c.py")}
    assert doubled_back(paths) == [("a.py", "b.py", "a.py", "c.py")]
