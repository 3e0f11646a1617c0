"""The transport: uvicorn, the sockets, and what a serving process owes its clients.

Any ASGI application runs here, the real server's and the fake one of
`llmserve_ref.bench.fake_server` alike; nothing in this module knows an engine. Three
things a server must get right at this level are a few lines each:

* **Nagle off.** Streaming writes many small segments, and with Nagle's algorithm on a
  client's delayed ACK holds each response up to 40 ms (`bind`).
* **Slow headers.** A client that sends its request headers a byte every few seconds is
  not idle, so uvicorn's keep-alive timeout never closes it; `HeaderTimeout` does.
* **Graceful shutdown.** SIGINT/SIGTERM stop accepting, let in-flight streams finish
  for up to a grace period (`GracefulServer` calls the `on_shutdown` it is given, which
  drains the engine), and exit with status 0.

>>> sock = bind("127.0.0.1", 0)
>>> url_of(sock).startswith("http://127.0.0.1:")
True
>>> sock.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn
from starlette.types import ASGIApp


class GracefulServer(uvicorn.Server):
    """uvicorn's server, plus: drain on shutdown, announce the URL, exit 0."""

    def __init__(
        self,
        config: uvicorn.Config,
        on_shutdown: Callable[[], None] = lambda: None,
        announce: str | None = None,
    ) -> None:
        super().__init__(config)
        self.on_shutdown, self.announce = on_shutdown, announce

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self.announce:
            print(self.announce, flush=True)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # New requests get 503; in-flight ones finish, or end with "abort" after the grace.
        self.on_shutdown()
        await super().shutdown(sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """SIGINT/SIGTERM start the graceful shutdown. Unlike uvicorn, don't re-raise the
        signal afterwards: a server that shut down as asked exits with status 0."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on (`host`, `port`), with Nagle's algorithm off; port 0: any free one.

    Streaming writes many small segments: the response headers, then one event per token.
    With Nagle's algorithm on, a small segment waits until the previous one is acknowledged,
    and the client, with nothing to send, delays its acknowledgement by up to 40 ms (Linux's
    delayed ACK): every response on a reused connection would start about 40 ms late.
    asyncio turns Nagle off only on sockets it recognises as TCP by their protocol number,
    which `socket.create_server` leaves at 0, so it is switched off here; the connections the
    server accepts inherit the option.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def url_of(sock: socket.socket) -> str:
    """The ``http://`` URL a listening socket serves."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def http_protocols() -> dict[str, type[asyncio.Protocol]]:
    """uvicorn's HTTP/1.1 implementations installed here, by the name its ``--http`` takes:
    ``h11`` (pure Python, always there) and ``httptools`` (llhttp's C parser, with
    ``uvicorn[standard]``, which vLLM and SGLang install)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    protocols: dict[str, type[asyncio.Protocol]] = {"h11": H11Protocol}
    with contextlib.suppress(ImportError):
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        protocols["httptools"] = HttpToolsProtocol
    return protocols


class HeaderTimeout(asyncio.Protocol):
    """Added to uvicorn's HTTP protocol: close a connection whose request headers take too long.

    uvicorn closes a keep-alive connection that stays idle, but one byte every few
    seconds is not idle: a client sending its headers slowly (slowloris) would hold a
    connection forever. The clock starts when the connection opens and again after each
    response; a request's complete headers stop it. `header_timeout_s` is set per server
    (`uvicorn_config`), which puts this class in front of h11's or httptools' protocol.

    It reads what both of uvicorn's protocols keep (`UVICORN_INTERNALS`: the request in
    progress, its event loop and its transport) and hooks their ``on_response_complete``:
    uvicorn's internals, not its API, so tests/serving/test_transport.py checks them on
    each protocol and fails, naming what moved, when a uvicorn release changes them.
    """

    header_timeout_s: float  # set per server by `uvicorn_config`
    _timer: asyncio.TimerHandle | None = None
    # uvicorn's, set by its protocol's __init__ and connection_made:
    cycle: Any  # the request in progress (None before the first), with `response_complete`
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)  # h11's or httptools'
        if self._in_request():
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]  # h11's or httptools'
        if not self._in_request():  # a pipelined request may already have started
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _in_request(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _arm(self) -> None:
        self._disarm()
        self._timer = self.loop.call_later(self.header_timeout_s, self._too_slow)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _too_slow(self) -> None:
        if not self._in_request() and not self.transport.is_closing():
            self.transport.close()


UVICORN_INTERNALS = ("cycle", "loop", "transport", "on_response_complete")


def uvicorn_config(
    app: ASGIApp,
    header_timeout_s: float,
    shutdown_grace: float,
    log_level: str,
    http: str = "h11",
    loop: str = "asyncio",
) -> uvicorn.Config:
    """uvicorn's settings for an app: the header timeout on the HTTP protocol `http` (as
    uvicorn's ``--http``), the event `loop` (as its ``--loop``), and time to drain on
    shutdown.

    h11 on asyncio's loop unless asked otherwise, even where httptools and uvloop are
    installed (uvicorn's ``auto`` would take them): h11 refuses request headers past its
    16 KiB event limit with 400, and httptools accepts any size (both checked by
    tests/serving/test_transport.py). Nor did httptools on uvloop, what
    ``uvicorn[standard]`` adds, pay here: benchmarks/engine.py measures both stacks side
    by side, and their HTTP/in-process ratios differ by less than the spread between runs.
    """
    protocols = http_protocols()
    if http not in protocols:
        raise ValueError(
            f"HTTP protocol {http!r} is not installed here; choose one of {sorted(protocols)} "
            "(httptools comes with `pip install 'uvicorn[standard]'`)."
        )
    protocol = type(
        "HeaderTimeout", (HeaderTimeout, protocols[http]), {"header_timeout_s": header_timeout_s}
    )
    return uvicorn.Config(
        app,
        http=protocol,
        loop=loop,
        log_level=log_level,
        lifespan="off",
        timeout_graceful_shutdown=math.ceil(shutdown_grace) + 5,
    )


@contextlib.contextmanager
def run_in_thread(server: uvicorn.Server, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Run a uvicorn `server` on a thread of this process while the ``with`` block runs,
    listening on (`host`, `port`); yield its URL. Port 0 picks a free port.

    Leaving the block asks the server to exit and waits for its thread (a
    `GracefulServer` drains first). Any ASGI app runs this way: the real server in
    `llmserve_ref.serving.launcher.serve_in_thread`, the fake one of
    `llmserve_ref.bench.fake_server`.
    """
    sock = bind(host, port)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the server thread stopped before it started serving")
            time.sleep(0.01)
        yield url_of(sock)
    finally:
        server.should_exit = True
        thread.join()
        sock.close()
