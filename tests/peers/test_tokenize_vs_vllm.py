"""/tokenize, /detokenize and /version answer as vLLM's do: the same request to both servers
gets the same tokens, counts, strings and text, and the same fields; a request vLLM refuses
with a 400 is refused by ours too."""

from __future__ import annotations

import httpx
import pytest

from . import servers

if not servers.HAVE_VLLM:
    pytest.skip(servers.NEEDS_VLLM, allow_module_level=True)

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "A fox?"}]
TOKENIZE = [
    {"prompt": "Once upon a time, a fox"},
    {"prompt": "Once upon a time", "add_special_tokens": False},
    {"prompt": "naïve café 🙂", "return_token_strs": True},
    {"model": "tiny", "prompt": ""},
    {"messages": MESSAGES},
    {"messages": MESSAGES, "add_generation_prompt": False, "return_token_strs": True},
    {"messages": [*MESSAGES, {"role": "assistant", "content": "A fox"}],
     "add_generation_prompt": False, "continue_final_message": True},
]  # fmt: skip
REFUSED = [
    ("/tokenize", {}),  # neither a prompt nor messages
    ("/tokenize", {"prompt": "Once", "model": "not-served"}),
    ("/tokenize", {"messages": MESSAGES, "add_generation_prompt": True,
                   "continue_final_message": True}),
    ("/detokenize", {"tokens": "Once"}),
]  # fmt: skip


def post(server: servers.Server, route: str, body: dict) -> httpx.Response:
    return httpx.post(f"{server.url}{route}", json=body, timeout=30)


@pytest.mark.parametrize("body", TOKENIZE, ids=[str(b)[:60] for b in TOKENIZE])
def test_tokenize_answers_as_vllm_does(vllm, ours, body):
    theirs, mine = post(vllm, "/tokenize", body), post(ours, "/tokenize", body)
    assert theirs.status_code == mine.status_code == 200, (theirs.text, mine.text)
    assert mine.json() == theirs.json()


@pytest.mark.parametrize("body", TOKENIZE, ids=[str(b)[:60] for b in TOKENIZE])
def test_detokenize_gives_back_what_vllm_gives_back(vllm, ours, body):
    tokens = post(vllm, "/tokenize", body).json()["tokens"]
    theirs, mine = (post(s, "/detokenize", {"tokens": tokens}) for s in (vllm, ours))
    assert theirs.status_code == mine.status_code == 200
    assert mine.json() == theirs.json()


@pytest.mark.parametrize(("route", "body"), REFUSED, ids=[str(b)[:50] for _, b in REFUSED])
def test_what_vllm_refuses_ours_refuses_with_a_400_or_404(vllm, ours, route, body):
    theirs, mine = post(vllm, route, body), post(ours, route, body)
    assert theirs.status_code >= 400, theirs.text
    assert mine.status_code == theirs.status_code, (mine.text, theirs.text)
    assert mine.json()["error"]["message"]


def test_version_has_vllms_field(vllm, ours):
    theirs, mine = (httpx.get(f"{s.url}/version", timeout=30) for s in (vllm, ours))
    assert set(mine.json()) == set(theirs.json()) == {"version"}
