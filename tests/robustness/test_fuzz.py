"""Schemathesis fuzzes the server from its own OpenAPI document (`openapi_document`, what
``GET /openapi.json`` serves): for each route, requests that the document allows and
requests that it does not, and every other HTTP method. Every answer must be no 5xx, what
the document says (status, content type, headers, body), a 4xx for what the document
refuses, and every 4xx must carry OpenAI's error body.

Seeded: Hypothesis derandomized, Schemathesis' deterministic generation, and nothing taken
from the answers, so each run sends the same requests and a failure in CI is a failure on a
laptop.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from openapi_checks import check_events
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
    unsupported_method,
)

from llmserve_ref.serving.launcher import RunningServer
from llmserve_ref.serving.openapi import openapi_document

# Per route and phase: about 580 requests in all, 1-1.5 minutes on two CPU cores.
EXAMPLES = 50
STATUSES: dict[str, Counter] = defaultdict(Counter)  # by route: how many answers of each status

# positive_data_acceptance is left out: a body the schema allows can still be refused
# with a 400 that depends on more than one field (the prompt and max_tokens must fit the
# context) or on the sampler (`SamplingParams` checks ranges); those are 4xx, checked below.
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
    unsupported_method,
]

DOCUMENT = openapi_document("tiny")
schema = schemathesis.openapi.from_dict(DOCUMENT)
schema.config.generation.update(max_examples=EXAMPLES, deterministic=True)
# Read streams to their end (Schemathesis stops after 20 events by default), so that the
# whole stream is checked: at most 16 choices of at most a context's tokens each.
schema.config.max_stream_events = 1 << 16
# Nothing learned from the answers: they hold sampled text and random ids, and building
# requests from them (or from what 4xx messages say) would make each run send others.
phases = schema.config.phases
for phase in (phases.examples, phases.coverage, phases.fuzzing):
    phase.extra_data_sources.responses = False
phases.fuzzing.error_feedback.is_enabled = False


@schemathesis.check
def openai_error_body(ctx, response, case) -> bool | None:
    """Every 4xx, documented or not, is OpenAI's ``{"error": {...}}`` with a message."""
    if 400 <= response.status_code < 500:
        body = response.json()
        assert set(body) == {"error"}, body
        assert set(body["error"]) == {"message", "type", "param", "code"}, body
        assert body["error"]["message"], body
    return None


@schemathesis.check
def event_stream(ctx, response, case) -> bool | None:
    """A streamed answer: its chunks as the document says, and ``data: [DONE]`` last."""
    content_type = response.headers.get("content-type", [""])[0]
    if content_type.startswith("text/event-stream"):
        content = DOCUMENT["paths"][case.path]["post"]["responses"]["200"]["content"]
        check_events(DOCUMENT, content["text/event-stream"], response.content.decode())
    return None


@pytest.fixture(scope="module", autouse=True)
def report():
    """Print what the fuzz sent, by route and status, once it is done."""
    yield
    print()
    for route, statuses in sorted(STATUSES.items()):
        by_status = ", ".join(f"{n} x {status}" for status, n in sorted(statuses.items()))
        print(f"fuzz: {route}: {sum(statuses.values())} requests ({by_status})")


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,  # a generation takes what it takes; the request has a timeout instead
    suppress_health_check=list(HealthCheck),
)
def test_fuzz(case, server: RunningServer):
    response = case.call_and_validate(
        base_url=server.url,
        checks=CHECKS,
        additional_checks=[openai_error_body, event_stream],
        timeout=60,
    )
    STATUSES[case.operation.label][response.status_code] += 1  # 405s: other methods sent
