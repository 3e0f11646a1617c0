"""The ASGI application: routes, middleware and error handlers around the handlers.

Nine routes, on Starlette:

* ``POST /v1/chat/completions`` and ``POST /v1/completions`` generate, whole or
  streamed as server-sent events (``"stream": true``), with ``n`` choices;
* ``GET /v1/models`` names the one model served;
* ``GET /health`` answers while the server is up;
* ``GET /metrics`` is the Prometheus text of `llmserve_ref.serving.metrics`;
* ``GET /openapi.json`` describes them all (`llmserve_ref.serving.openapi`);
* ``POST /tokenize``, ``POST /detokenize`` and ``GET /version`` are vLLM's
  (`llmserve_ref.serving.tokenization`).

Around them, outermost first: every response is counted by endpoint and status (the
500s Starlette makes of unhandled errors included); web origins allowed by `Access` get
CORS headers (none by default); ``/v1/*`` needs the API key, if the server has one. Every
error leaves as OpenAI's error body (`llmserve_ref.serving.errors`), a 404 or 405 from
routing and a bug's 500 included, and the server goes on serving.

>>> access = Access(api_key="s3cret", allowed_origins=("https://app.example",))
>>> [m.cls.__name__ for m in middleware(access)]
['CORSMiddleware', 'RequireApiKey']
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from llmserve_ref.engine.interface import Engine
from llmserve_ref.serving.errors import OpenAIError
from llmserve_ref.serving.handlers import OpenAIServer
from llmserve_ref.serving.limits import Limits
from llmserve_ref.serving.metrics import ServerMetrics
from llmserve_ref.serving.tokenization import TokenizerRoutes

ENDPOINTS = (
    "/v1/models",
    "/v1/completions",
    "/v1/chat/completions",
    "/health",
    "/metrics",
    "/openapi.json",
    "/tokenize",
    "/detokenize",
    "/version",
)


@dataclass(frozen=True)
class Access:
    """Who may use the server: the API key `/v1/*` needs (None: anyone who can connect),
    and the web origins whose pages may call it from a browser (CORS; none by default)."""

    api_key: str | None = None
    allowed_origins: tuple[str, ...] = ()


class RequireApiKey:
    """ASGI middleware: `/v1/*` needs ``Authorization: Bearer <key>``, as vLLM's --api-key;
    otherwise 401 with OpenAI's error body. CORS preflights (OPTIONS) carry no key."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app, self.expected = app, f"Bearer {api_key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["path"].startswith("/v1/")
            and scope["method"] != "OPTIONS"
            and not hmac.compare_digest(
                dict(scope["headers"]).get(b"authorization", b""), self.expected
            )
        ):
            error = OpenAIError(
                "Incorrect API key provided. Send the key the server was started with "
                "(--api-key or LLMSERVE_API_KEY) as 'Authorization: Bearer <key>'.",
                401,
                code="invalid_api_key",
            )
            response = JSONResponse(error.body(), 401, headers={"WWW-Authenticate": "Bearer"})
            return await response(scope, receive, send)
        await self.app(scope, receive, send)


class CountRequests:
    """ASGI middleware: count every response by route, method and status class."""

    def __init__(self, app: ASGIApp, metrics: ServerMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        endpoint = scope["path"] if scope["path"] in ENDPOINTS else "other"

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status = f"{message['status'] // 100}xx"  # grouped, as vLLM's instrumentator
                self.metrics.http.inc(handler=endpoint, method=scope["method"], status=status)
            await send(message)

        await self.app(scope, receive, counting_send)


async def _openai_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, OpenAIError)
    headers = {"Retry-After": "1"} if error.status == 429 else None  # seconds
    return JSONResponse(error.body(), status_code=error.status, headers=headers)


async def _http_error(request: Request, error: Exception) -> Response:
    """404 and 405 from routing, in OpenAI's error body."""
    assert isinstance(error, HTTPException)
    where = f"{request.method} {request.url.path}"
    if error.status_code == 405:
        body = OpenAIError(f"Method not allowed: {where}.", 405, code="method_not_allowed")
    else:
        body = OpenAIError(
            f"Unknown request URL: {where}. Please check the URL for typos.",
            error.status_code,
            code="unknown_url",
        )
    return JSONResponse(body.body(), status_code=body.status, headers=error.headers)


async def _server_error(request: Request, error: Exception) -> Response:
    """A bug, not the client's fault: still an OpenAI error body, and the server goes on."""
    body = OpenAIError(f"Internal server error: {error!r}", 500, type="server_error")
    return JSONResponse(body.body(), status_code=500)


class App(Starlette):
    """Starlette, with every response counted, the 500s that its outermost middleware
    makes of unhandled errors included (a middleware in Starlette's list sits inside it)."""

    def __init__(self, api: OpenAIServer, **kwargs: object) -> None:
        self.api = api
        super().__init__(**kwargs)  # type: ignore[arg-type]

    def build_middleware_stack(self) -> ASGIApp:
        return CountRequests(super().build_middleware_stack(), self.api.metrics)


def middleware(access: Access) -> list[Middleware]:
    """CORS for the allowed origins (outermost: a preflight is answered before any key
    check), then the API key check, each only if `access` asks for it."""
    stack = []
    if access.allowed_origins:
        stack.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(access.allowed_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type"],
            )
        )
    if access.api_key is not None:
        stack.append(Middleware(RequireApiKey, api_key=access.api_key))
    return stack


def create_app(
    engine: Engine, model: str, limits: Limits | None = None, access: Access | None = None
) -> App:
    """The ASGI app serving `engine` under the model name `model`."""
    limits = limits or Limits()
    api, tokenizer = OpenAIServer(engine, model, limits), TokenizerRoutes(engine, model, limits)
    return App(
        api,
        routes=[
            Route("/v1/models", api.models, methods=["GET"]),
            Route("/v1/completions", api.completions, methods=["POST"]),
            Route("/v1/chat/completions", api.chat_completions, methods=["POST"]),
            Route("/health", api.health, methods=["GET"]),
            Route("/metrics", api.metrics_text, methods=["GET"]),
            Route("/openapi.json", api.openapi, methods=["GET"]),
            Route("/tokenize", tokenizer.tokenize, methods=["POST"]),
            Route("/detokenize", tokenizer.detokenize, methods=["POST"]),
            Route("/version", tokenizer.version, methods=["GET"]),
        ],
        middleware=middleware(access or Access()),
        exception_handlers={
            OpenAIError: _openai_error,
            HTTPException: _http_error,
            Exception: _server_error,
        },
    )
