"""Speculative decoding against target-only decoding, for gamma 1 to 8, measured side by side.

    python benchmarks/speculative.py [--rounds 5] [--tokens 64] [--temperature 1.0]

For each gamma, prints the acceptance rate alpha and the tokens per target forward
(counted, deterministic for a seed) next to (1 − alpha^(gamma+1)) / (1 − alpha), and the
wall-clock speedup over `generate` with the target alone next to Leviathan et al.'s
expected speedup: with the measured cost ratio c = draft step / target step, once with
their assumption that verifying gamma + 1 tokens costs one target step (v = 1) and once
with the measured v. Then the best gamma. Every call is interleaved round by round with
the others and reported as a median (see `llmserve_ref.planning.measure`); on a CPU torch runs
on one thread.
"""

from __future__ import annotations

import argparse

import torch

from llmserve_ref.device import get_device
from llmserve_ref.engine.speculative import (
    SpeculativeDecoder,
    decode_prompts,
    expected_speedup,
    expected_tokens_per_forward,
    forward_steppers,
)
from llmserve_ref.model.generate import generate
from llmserve_ref.model.sampling import SamplingParams
from llmserve_ref.model.weights import load_draft, load_target
from llmserve_ref.planning.measure import interleaved, torch_threads

GAMMAS = range(1, 9)
FORWARD_ROUNDS = 50
PROMPTS = ("Once upon a time,", "Mia went to the park and", "<|user|>Tell me a story.<|assistant|>")


def main(rounds: int, tokens: int, temperature: float) -> None:
    device = get_device()
    target, tokenizer = load_target(device)
    draft, _ = load_draft(device)
    prompts = [tokenizer.encode(text, add_bos=True) for text in PROMPTS]
    params = SamplingParams(temperature=temperature, seed=0)

    def target_only() -> None:
        for prompt in prompts:
            list(generate(target, prompt, params, max_new_tokens=tokens))

    def speculative(gamma: int):
        def run() -> None:
            for prompt in prompts:
                list(SpeculativeDecoder(target, draft, prompt, params, gamma, tokens))

        return run

    threads = 1 if device.type == "cpu" else torch.get_num_threads()
    with torch_threads(threads):
        stats = {g: decode_prompts(target, draft, prompts, params, g, tokens) for g in GAMMAS}
        verify_steps = forward_steppers(target, context=32, widths=[1, *(g + 1 for g in GAMMAS)])
        draft_step = forward_steppers(draft, context=32, widths=[1])[1]
        seconds = interleaved(
            {"target only": target_only, **{f"gamma {g}": speculative(g) for g in GAMMAS}},
            rounds,
            device,
        )
        # Single forwards take milliseconds: many more rounds, timed apart from the long runs.
        seconds |= interleaved(
            {
                "draft step": draft_step,
                **{f"target {w} tokens": step for w, step in verify_steps.items()},
            },
            FORWARD_ROUNDS,
            device,
        )
    step = seconds["target 1 tokens"]
    c = seconds["draft step"] / step
    print(
        f"{device.type}, {threads} thread(s), temperature {temperature}, {len(prompts)} prompts "
        f"x {tokens} tokens, median of {rounds} rounds"
    )
    print(
        f"target step {step * 1e3:.2f} ms, draft step {seconds['draft step'] * 1e3:.2f} ms: "
        f"cost ratio c = {c:.3f}"
    )
    print(
        "gamma  alpha  tokens/forward (expected)  verify cost v  speedup  expected (v=1)  "
        "(measured v)"
    )
    rows = {}
    for g in GAMMAS:
        alpha, per_forward = stats[g].acceptance_rate, stats[g].tokens_per_target_forward
        v = seconds[f"target {g + 1} tokens"] / step
        speedup = seconds["target only"] / seconds[f"gamma {g}"]
        rows[g] = (
            per_forward,
            expected_tokens_per_forward(alpha, g),
            speedup,
            expected_speedup(alpha, g, c),
            expected_speedup(alpha, g, c, v),
        )
        print(
            f"{g:5}  {alpha:.3f}  {per_forward:14.2f} ({rows[g][1]:5.2f})  {v:13.2f}  "
            f"{speedup:6.2f}x  {rows[g][3]:13.2f}x  {rows[g][4]:11.2f}x"
        )
    best = max(GAMMAS, key=lambda g: rows[g][2])
    per_forward, expected_tokens, speedup, paper, refined = rows[best]
    print(
        f"speculative decoding, best gamma {best}: wall-clock speedup {speedup:.2f}x "
        f"(theory {paper:.2f}x with v = 1, {refined:.2f}x with measured v), "
        f"{per_forward:.2f} tokens per target forward (theory {expected_tokens:.2f})"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (median)")
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per prompt")
    parser.add_argument("--temperature", type=float, default=1.0, help="0 is greedy")
    args = parser.parse_args()
    main(args.rounds, args.tokens, args.temperature)
