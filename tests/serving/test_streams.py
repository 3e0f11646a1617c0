"""Server-sent events: each object one event, unbuffered, the generator closed however it ends."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect
from starlette.routing import Route

from llmserve_ref.serving.streams import SSE_HEADERS, EventStream, disconnected, sse


def test_an_event_is_a_data_line_and_a_blank_line():
    assert sse({"a": "é", "b": [1, 2]}) == 'data: {"a":"é","b":[1,2]}\n\n'
    assert sse("[DONE]") == "data: [DONE]\n\n"


def app_with(events_factory, closed: list[str]) -> Starlette:
    async def route(request):
        return EventStream(events_factory(closed), lambda: closed.append("on_close"))

    return Starlette(routes=[Route("/", route)])


async def three(closed: list[str]):
    try:
        yield {"n": 1}
        yield {"n": 2}
        yield "[DONE]"
    finally:
        closed.append("finally")


def test_a_whole_stream_arrives_as_events_with_the_headers_proxies_need():
    closed: list[str] = []

    async def main():
        transport = httpx.ASGITransport(app=app_with(three, closed))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.get("/")

    response = asyncio.run(main())
    assert response.text == 'data: {"n":1}\n\ndata: {"n":2}\n\ndata: [DONE]\n\n'
    assert response.headers["content-type"].startswith("text/event-stream")
    assert all(response.headers[k] == v for k, v in SSE_HEADERS.items())
    assert closed == ["finally", "on_close"]


def test_a_response_never_started_still_runs_on_close():
    closed: list[str] = []

    async def main():
        stream = EventStream(three(closed), lambda: closed.append("on_close"))

        async def receive():
            return {"type": "http.disconnect"}

        async def send(message):
            raise OSError("the client has gone")

        with contextlib.suppress(OSError, ClientDisconnect):
            await stream({"type": "http", "asgi": {"spec_version": "2.4"}}, receive, send)

    asyncio.run(main())
    assert "on_close" in closed


def test_disconnected_returns_on_the_disconnect_message():
    from starlette.requests import Request

    messages = iter(
        [{"type": "http.request", "body": b"", "more_body": False}, {"type": "http.disconnect"}]
    )

    async def receive():
        return next(messages)

    async def main():
        await asyncio.wait_for(disconnected(Request({"type": "http"}, receive)), 1)

    asyncio.run(main())
