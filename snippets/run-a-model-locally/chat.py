"""Stream a chat reply from any OpenAI-compatible server, printing tokens as they arrive.

The server is `OPENAI_BASE_URL` (the official client's own variable): Ollama at
http://localhost:11434/v1, llama.cpp's llama-server at http://localhost:8080/v1,
or our `llmserve-ref serve` at http://127.0.0.1:8000/v1 (the default). `MODEL`
names the model (default: tiny, ours). With `--serve`, the script starts our
server itself, in this process, on a free port, and talks to that.
"""

import os
import sys

from openai import OpenAI


def chat(base_url: str, model: str, prompt: str) -> None:
    client = OpenAI(base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY", "none"))
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=60,
        temperature=0.8,
        seed=1,
        stream=True,
        stream_options={"include_usage": True},  # one last chunk with the token counts
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            print(chunk.choices[0].delta.content, end="", flush=True)
        if chunk.usage:
            print(
                f"\n[usage] {chunk.usage.prompt_tokens} prompt tokens, "
                f"{chunk.usage.completion_tokens} completion tokens"
            )


if __name__ == "__main__":
    model, prompt = os.environ.get("MODEL", "tiny"), "Tell me a story about Zoé."
    if "--serve" in sys.argv:  # no server at hand: run ours inside this script
        from llmserve_ref.serving.launcher import serve_in_thread

        with serve_in_thread("tiny") as server:
            chat(server.base_url, model, prompt)
    else:
        chat(os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1"), model, prompt)
