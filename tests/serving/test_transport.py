"""The transport: the socket, the slow-headers cut-off, the graceful server on a thread."""

from __future__ import annotations

import socket
import time

import httpx
import pytest
import uvicorn

from llmserve_ref.serving.transport import (
    UVICORN_INTERNALS,
    GracefulServer,
    HeaderTimeout,
    bind,
    http_protocols,
    run_in_thread,
    url_of,
    uvicorn_config,
)

# Both of uvicorn's HTTP/1.1 protocols: h11, the server's, and httptools (what
# uvicorn[standard] adds; in the tests extra, for these tests and benchmarks/engine.py).
PROTOCOLS = ["h11", "httptools"]


def test_the_server_turns_nagles_algorithm_off_on_every_connection():
    """Token events are small writes: with Nagle's algorithm on, each waits for the client's
    delayed ACK (40 ms on Linux) on a reused connection. asyncio does not switch it off on
    a socket made by `socket.create_server`, so `bind` does, and accepted sockets inherit it."""
    listener = bind("127.0.0.1", 0)
    try:
        client = socket.create_connection(listener.getsockname()[:2])
        accepted, _ = listener.accept()
        assert listener.proto == 0  # why asyncio's own check does not recognise it as TCP
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        accepted.close()
        client.close()
    finally:
        listener.close()


async def hello(scope, receive, send) -> None:
    """The smallest ASGI app: 200 and a word."""
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"hello"})


def test_any_app_runs_on_a_thread_and_the_shutdown_hook_runs_once_on_exit():
    shut: list[str] = []
    config = uvicorn_config(hello, header_timeout_s=5.0, shutdown_grace=0.0, log_level="warning")
    server = GracefulServer(config, lambda: shut.append("drained"))
    with run_in_thread(server) as url:
        assert url.startswith("http://127.0.0.1:")
        assert httpx.get(url).text == "hello"
        assert shut == []
    assert shut == ["drained"]


@pytest.mark.parametrize("http", PROTOCOLS)
def test_headers_that_never_complete_are_cut_off_after_the_timeout(http):
    config = uvicorn_config(hello, 0.2, shutdown_grace=0.0, log_level="warning", http=http)
    with run_in_thread(GracefulServer(config)) as url:
        host, port = url.removeprefix("http://").split(":")
        slow = socket.create_connection((host, int(port)))
        slow.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        slow.settimeout(10)
        started = time.monotonic()
        assert slow.recv(1024) == b""  # closed by the server
        assert 0.2 <= time.monotonic() - started < 5
        slow.close()
        assert httpx.get(url).text == "hello"  # and it goes on serving


@pytest.mark.parametrize("http", PROTOCOLS)
def test_the_clock_starts_again_after_each_response_on_a_kept_alive_connection(http):
    """uvicorn calls `on_response_complete` after a response, which arms the clock again:
    without that call, a second request's headers that never complete would hold the
    connection open (uvicorn's own keep-alive timeout stops once bytes arrive)."""
    config = uvicorn_config(hello, 0.3, shutdown_grace=0.0, log_level="warning", http=http)
    with run_in_thread(GracefulServer(config)) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as client:
            client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            response = b""
            while not response.endswith(b"\r\n0\r\n\r\n"):  # its last chunk
                response += client.recv(1024)
            assert b"hello" in response  # the first response; the connection is kept alive
            client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
            started = time.monotonic()
            assert client.recv(1024) == b""  # closed by the server
            # The server's clock starts when it finishes the response, a moment before
            # this client sends again: so a little under 0.3 s from here, never much.
            assert 0.25 <= time.monotonic() - started < 5


@pytest.mark.parametrize("http", PROTOCOLS)
def test_uvicorn_still_has_what_the_header_timeout_reads(http):
    """`HeaderTimeout` reads uvicorn's internals, not its API: on a live connection of each
    protocol, every one of them is where it expects, or this names what moved."""
    config = uvicorn_config(hello, 5.0, shutdown_grace=0.0, log_level="warning", http=http)
    connections: list = []

    class Recording(config.http):  # type: ignore[misc,name-defined]
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            connections.append(self)

    config.http = Recording
    with run_in_thread(GracefulServer(config)) as url, httpx.Client() as client:
        assert client.get(url).text == "hello"
        (protocol,) = connections
        where = f"uvicorn {uvicorn.__version__}'s {http_protocols()[http].__name__}"
        # The hook HeaderTimeout defines itself must be uvicorn's too: look on uvicorn's class.
        own = http_protocols()[http]
        missing = [
            name
            for name in UVICORN_INTERNALS
            if not hasattr(own if name in vars(HeaderTimeout) else protocol, name)
        ]
        assert not missing, f"{where} no longer has {missing}, which HeaderTimeout reads"
        # The server's thread marks the cycle complete just after the last byte goes out,
        # which the client may have read first: wait for it, a moment at most.
        deadline = time.monotonic() + 5
        while not protocol.cycle.response_complete and time.monotonic() < deadline:
            time.sleep(0.01)
        assert protocol.cycle.response_complete is True, f"{where}: the cycle moved"
        assert client.get(url).text == "hello"  # the same connection, armed again


def header_answer(url: str, size: int) -> bytes:
    """The status line a server answers a request whose one header is `size` bytes with."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as client:
        client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * size + b"\r\n\r\n")
        return client.recv(1024).split(b"\r\n")[0]


def test_h11_the_default_refuses_huge_headers_which_httptools_accepts():
    """Why the server runs h11 where httptools is installed too: h11 answers headers past
    its event limit (16 KiB, read in 64 KiB chunks) with 400; httptools takes a megabyte,
    and more, into memory. If httptools grows a limit, this fails: time to look again."""
    answers = {}
    for http in ("default", "httptools"):
        choice = {} if http == "default" else {"http": http}
        config = uvicorn_config(hello, 5.0, shutdown_grace=0.0, log_level="critical", **choice)
        with run_in_thread(GracefulServer(config)) as url:
            answers[http] = [header_answer(url, size) for size in (8_000, 1_000_000)]
            assert httpx.get(url).text == "hello"  # and it goes on serving
    assert answers["default"] == [b"HTTP/1.1 200 OK", b"HTTP/1.1 400 Bad Request"]
    assert answers["httptools"] == [b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK"]


def test_an_unknown_protocol_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match=r"'h2' is not installed here; choose one of \['h11'"):
        uvicorn_config(hello, 5.0, shutdown_grace=0.0, log_level="warning", http="h2")


def test_an_ipv6_url_has_brackets():
    try:
        sock = bind("::1", 0)
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    try:
        assert url_of(sock).startswith("http://[::1]:")
    finally:
        sock.close()
