"""Checks of what the server sends against its own OpenAPI document (tests and the fuzz)."""

from __future__ import annotations

import json

from jsonschema import Draft202012Validator

from llmserve_ref.serving.openapi import ERRORS


def documented_response(document: dict, method: str, path: str, status: int) -> dict:
    """What the document promises for `method` `path` answering `status`."""
    operation = document["paths"].get(path, {}).get(method.lower())
    if operation is None:  # an unknown URL or a wrong method: the reusable error responses
        return document["components"]["responses"][ERRORS[str(status)][0]]
    assert str(status) in operation["responses"], f"{method} {path}: {status} not documented"
    response = operation["responses"][str(status)]
    if "$ref" in response:
        response = document["components"]["responses"][response["$ref"].rsplit("/", 1)[1]]
    return response


def check_body(document: dict, schema: dict, body: object) -> None:
    """Validate `body` against `schema`, whose ``$ref``s point into `document`.

    OpenAPI 3.1's schemas are JSON Schema 2020-12: the document is the root, its other keys
    are keywords a validator ignores, and ``allOf`` applies `schema` there.
    """
    Draft202012Validator({**document, "allOf": [schema]}).validate(body)


def check_events(document: dict, media: dict, text: str) -> None:
    """A server-sent events body: every ``data:`` event but the closing ``[DONE]`` is a
    chunk, as the ``contentSchema`` of the event's data in `media` says."""
    chunk_schema = media["schema"]["properties"]["data"]["anyOf"][1]["contentSchema"]
    events = [event for event in text.split("\n\n") if event]
    assert all(event.startswith("data: ") for event in events), text
    *chunks, done = (event.removeprefix("data: ") for event in events)
    assert done == "[DONE]" and chunks, text
    for chunk in chunks:
        check_body(document, chunk_schema, json.loads(chunk))
