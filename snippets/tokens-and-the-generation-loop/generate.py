"""Generate text with the project's tiny model, one token at a time, and show every step.

    python generate.py "Once upon a time, there was a" --max-new-tokens 20
    python generate.py "One day, Mia found a" --temperature 0.8 --seed 1

Prints the prompt's token ids and pieces, then each new token as the loop chooses it
(greedy unless --temperature is above 0), then the whole text.
"""

from __future__ import annotations

import argparse

from llmserve_ref.device import get_device
from llmserve_ref.model.generate import generate
from llmserve_ref.model.sampling import SamplingParams
from llmserve_ref.model.weights import load_target


def main(prompt: str, max_new_tokens: int, temperature: float, seed: int | None) -> None:
    model, tokenizer = load_target(get_device())
    prompt_ids = tokenizer.encode(prompt, add_bos=True)
    print(f"prompt: {len(prompt_ids)} tokens")
    print(f"  ids:    {prompt_ids}")
    print(f"  pieces: {[tokenizer.decode([i]) for i in prompt_ids]}")
    params = SamplingParams(temperature=temperature, seed=seed)
    output: list[int] = []
    stream = generate(model, prompt_ids, params, max_new_tokens, {tokenizer.eos_id})
    for step, token in enumerate(stream, start=1):
        output.append(token)
        print(f"step {step:3}: id {token:3} {tokenizer.decode([token])!r}")
    print(tokenizer.decode(prompt_ids + output, skip_special_tokens=True))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prompt", help="the text to continue")
    parser.add_argument("--max-new-tokens", type=int, default=40)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 means greedy")
    parser.add_argument("--seed", type=int, default=None, help="makes sampling repeatable")
    args = parser.parse_args()
    main(args.prompt, args.max_new_tokens, args.temperature, args.seed)
