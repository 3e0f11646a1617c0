"""Decode with the KV cache against recomputing the prefix, and prefill against decode.

    python benchmarks/kv_cache.py [--rounds 7]

On the tiny target model, at batch 1, prints two tables measured side by side (every
pass of one table interleaved round by round, medians; see `llmserve_ref.planning.measure`):

1. the time of one new token at several context lengths, with the KV cache (one decode
   step) and without it (a forward pass over the whole sequence), and their ratio;
2. prefill throughput (tokens/s of one prompt) at several prompt lengths against decode
   throughput (tokens/s of one step) at several batch sizes.

On a CPU torch runs on one thread, so that other processes on a shared machine do not
stall its parallel regions.
"""

from __future__ import annotations

import argparse

import torch

from llmserve_ref.device import get_device
from llmserve_ref.model.weights import load_target
from llmserve_ref.planning.measure import interleaved, torch_threads
from llmserve_ref.planning.phases import decode_step, prefill_step, recompute_step

CONTEXTS = (16, 64, 128, 255)
PROMPT_LENS = (16, 64, 256)
BATCHES = (1, 4, 16, 64)
DECODE_CONTEXT = 128


def main(rounds: int) -> None:
    device = get_device()
    model, _ = load_target(device)
    threads = 1 if device.type == "cpu" else torch.get_num_threads()
    with torch_threads(threads):
        per_token = interleaved(
            {
                **{("cache", c): decode_step(model, 1, c) for c in CONTEXTS},
                **{("recompute", c): recompute_step(model, c) for c in CONTEXTS},
            },
            rounds,
            device,
        )
        phases = interleaved(
            {
                **{("prefill", n): prefill_step(model, 1, n) for n in PROMPT_LENS},
                **{("decode", b): decode_step(model, b, DECODE_CONTEXT) for b in BATCHES},
            },
            rounds,
            device,
        )

    print(f"target model on {device.type} ({threads} thread(s)), medians of {rounds} rounds")
    print("\nms per new token, batch 1")
    print(f"{'context':>8} {'KV cache':>10} {'recompute':>10} {'ratio':>7}")
    for c in CONTEXTS:
        cached, recomputed = per_token[("cache", c)], per_token[("recompute", c)]
        ratio = recomputed / cached
        print(f"{c:>8} {cached * 1e3:>10.2f} {recomputed * 1e3:>10.2f} {ratio:>6.1f}x")

    print(f"\nprefill (batch 1) and decode ({DECODE_CONTEXT} tokens cached per sequence)")
    print(f"{'pass':>22} {'ms':>8} {'tokens/s':>10}")
    for n in PROMPT_LENS:
        t = phases[("prefill", n)]
        print(f"{f'prefill {n} tokens':>22} {t * 1e3:>8.2f} {n / t:>10.0f}")
    for b in BATCHES:
        t = phases[("decode", b)]
        print(f"{f'decode batch {b}':>22} {t * 1e3:>8.2f} {b / t:>10.0f}")
    longest = PROMPT_LENS[-1]
    prefill_rate = longest / phases[("prefill", longest)]
    print(
        f"\nprefill of {longest} tokens runs {prefill_rate * phases[('decode', 1)]:.1f}x "
        f"the tokens/s of batch-1 decode; batch {BATCHES[-1]} decode runs "
        f"{BATCHES[-1] * phases[('decode', 1)] / phases[('decode', BATCHES[-1])]:.1f}x"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds per table")
    main(parser.parse_args().rounds)
