"""Server-sent events: a response that stays open and writes each event as it comes.

OpenAI's API streams with server-sent events (SSE): one HTTP response of type
``text/event-stream`` in which the server writes ``data: <payload>`` and a blank line
whenever it has something to say, and ``data: [DONE]`` at the end. This module is the
plumbing between the handler's events and the socket:

* `EventStream` writes each object the handler yields as one event, unbuffered
  (``X-Accel-Buffering: no`` tells nginx, and proxies that copy it, to pass each event
  on at once instead of collecting a buffer full first), and however the response ends
  (the client went away, the server stopped), closes the handler's generator, so its
  ``finally`` runs now, and runs `on_close` too;
* `disconnected` returns when the client has gone, for a response that is not streamed.

>>> sse({"id": "x"})
'data: {"id":"x"}\\n\\n'
>>> sse("[DONE]")
'data: [DONE]\\n\\n'
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable

from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse(obj: dict | str) -> str:
    """One server-sent event: ``data: <json>`` (or the string as it is) and a blank line."""
    data = (
        obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    )
    return f"data: {data}\n\n"


class EventStream(StreamingResponse):
    """Server-sent events, one per object that `events` yields. When the response ends,
    however it ends, `events` is closed, so its ``finally`` runs now, and `on_close` runs
    too: a generator the response never started has no ``finally`` to run."""

    def __init__(
        self, events: AsyncGenerator[dict | str, None], on_close: Callable[[], None]
    ) -> None:
        super().__init__(self._encoded(events), media_type="text/event-stream", headers=SSE_HEADERS)
        self.events, self.on_close = events, on_close

    @staticmethod
    async def _encoded(events: AsyncIterator[dict | str]) -> AsyncIterator[str]:
        async for event in events:
            yield sse(event)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.events.aclose()
            self.on_close()


async def disconnected(request: Request) -> None:
    """Return when the client has gone. Once its body is read, the only message that can
    come is ``http.disconnect`` (uvicorn sends it when the connection is lost)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
