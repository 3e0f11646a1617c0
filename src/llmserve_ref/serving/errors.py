"""OpenAI's error body: how the server says no.

Every refusal of the server, whatever its cause (a field of the wrong type, a body too
large, a full queue, a server shutting down), is one JSON body, the one OpenAI sends,
so every client reads every error the same way (the official ``openai`` packages raise
them as ``openai.BadRequestError``, ``openai.RateLimitError`` and so on)::

    {"error": {"message": "...", "type": "invalid_request_error",
               "param": "temperature", "code": "invalid_type"}}

The message says what was wrong and what to send instead; ``param`` names the field.

>>> error = OpenAIError("Missing required parameter: 'model'.", param="model",
...                     code="missing_parameter")
>>> error.status, error.body()["error"]["param"]
(400, 'model')
"""

from __future__ import annotations


class OpenAIError(Exception):
    """An error the client caused (4xx) or met (5xx), with OpenAI's error body."""

    def __init__(
        self,
        message: str,
        status: int = 400,
        param: str | None = None,
        code: str | None = None,
        type: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.message, self.status, self.param, self.code, self.type = (
            message,
            status,
            param,
            code,
            type,
        )

    def body(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }
