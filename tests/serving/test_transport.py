"""The transport: the socket, the slow-headers cut-off, the graceful server on a thread."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from llmserve_ref.serving.transport import (
    GracefulServer,
    bind,
    run_in_thread,
    url_of,
    uvicorn_config,
)


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


def test_headers_that_never_complete_are_cut_off_after_the_timeout():
    config = uvicorn_config(hello, header_timeout_s=0.2, shutdown_grace=0.0, log_level="warning")
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


def test_an_ipv6_url_has_brackets():
    try:
        sock = bind("::1", 0)
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    try:
        assert url_of(sock).startswith("http://[::1]:")
    finally:
        sock.close()
