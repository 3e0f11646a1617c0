"""The compiled decode step: the logits of the eager step, no sequence's blocks touched by
the padding, one graph per size whatever the sequences' lengths, one graph for every other step.

The oracle is the eager `ModelRunner` on the same chunks: a compiled graph fuses ops and
sums in another order, so logits agree to float32 rounding, not bit for bit (greedy
tokens are checked against `generate` in test_engine_core.py).
"""

from __future__ import annotations

import pytest
import torch

from llmserve_ref.engine.model_runner import ModelRunner
from llmserve_ref.engine.paged_batch import Chunk
from llmserve_ref.model.llama import Llama
from llmserve_ref.model.llama_config import ModelConfig

pytestmark = pytest.mark.slow  # each size compiles once per process (seconds each, cold)

SIZES = [1, 2, 16]  # 3 to 15 sequences run as 16
BLOCK = 4


def sequences(n: int, length: int, seed: int) -> list[list[int]]:
    """`n` random sequences of `length` to `length - 3` tokens (they end at different steps)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, 64, (length - i % 4,), generator=g).tolist() for i in range(n)]


def tables(seqs: list[list[int]]) -> list[list[int]]:
    """Disjoint blocks, 8 per sequence (32 positions)."""
    return [[8 * s + b for b in range(8)] for s in range(len(seqs))]


def held(table: list[int], position: int) -> list[int]:
    """The blocks a sequence holds once it has a token at `position` (its table grows)."""
    return table[: position // BLOCK + 1]


@pytest.fixture(scope="module")
def runners():
    """An eager runner and a compiled one, on the same random model, warmed up."""
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=64, hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    )  # fmt: skip
    model = Llama(config).eval()
    compiled = ModelRunner(model, num_blocks=128, block_size=BLOCK, compile_sizes=SIZES)
    assert compiled.compiled is not None
    compiled.compiled.warm_up()
    compiled.compiled.stance = "fail_on_recompile"  # a new graph after warm-up fails
    return ModelRunner(model, num_blocks=128, block_size=BLOCK), compiled


def steps(runner: ModelRunner, seqs: list[list[int]], prompt_len: int) -> list[torch.Tensor]:
    """Prefill each sequence's first `prompt_len` tokens, then decode the rest together."""
    pairs = list(zip(seqs, tables(seqs), strict=True))
    runner.forward([Chunk(s[:prompt_len], 0, held(t, prompt_len - 1), False) for s, t in pairs])
    return [
        runner.forward([Chunk([s[p]], p, held(t, p), True) for s, t in pairs if p < len(s)])
        for p in range(prompt_len, max(map(len, seqs)))
    ]


@pytest.mark.parametrize("n", [1, 2, 15, 16])
def test_decode_steps_give_the_eager_logits_at_every_length(runners, n):
    """Tables 1 to 8 blocks wide (positions 2 to 31, a block per 4), sizes padded (15 runs
    as 16) or not, sequences ending one by one (the size shrinks): no recompile (the
    stance would raise), the eager logits."""
    eager, compiled = runners
    seqs = sequences(n, length=32, seed=n)
    for a, b in zip(steps(eager, seqs, 2), steps(compiled, seqs, 2), strict=True):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)


def test_the_padding_writes_only_the_scratch_block(runners):
    eager, compiled = runners
    seqs = [s[:10] for s in sequences(15, length=13, seed=7)]  # 15 run padded to 16
    compiled.storage.data.zero_()
    eager.storage.data.zero_()
    steps(eager, seqs, 4)
    steps(compiled, seqs, 4)
    used = torch.tensor([b for t in tables(seqs) for b in t[:3]])  # 10 tokens: 3 blocks each
    real = compiled.storage.data[:, :, :128]  # the scratch block is the 129th
    torch.testing.assert_close(real, eager.storage.data, atol=1e-5, rtol=1e-5)
    unused = torch.ones(128, dtype=torch.bool)
    unused[used] = False
    assert not real[:, :, unused].any()  # no other block written
    assert compiled.storage.data[:, :, 128].any()  # the padding row's keys went here


def test_every_other_step_runs_the_dynamic_graph_and_gives_the_eager_logits(runners, monkeypatch):
    """17 prompts at once, decodes beside a sequence checking guesses, more decodes than the
    largest size, decodes beside a prompt: each runs the one graph of any number of tokens
    (no recompile: the stance would raise) and gives the eager logits; 15 decodes alone run
    the graph of 16."""
    eager, compiled = runners
    graphs = compiled.compiled
    ran = []  # which graph each step ran
    for name in ("hidden_states", "any_step"):
        run = getattr(graphs, name)
        monkeypatch.setattr(graphs, name, lambda b, run=run, n=name: ran.append(n) or run(b))
    seqs = sequences(18, length=12, seed=3)
    pairs = [(s, [3 * i + b for b in range(3)]) for i, s in enumerate(seqs)]  # 3 blocks each

    def decode(s: list[int], t: list[int], p: int) -> Chunk:
        return Chunk([s[p]], p, held(t, p), samples=True)

    last, new = pairs[16], pairs[17]
    steps = [
        [Chunk(s[:4], 0, held(t, 3), samples=True) for s, t in pairs[:17]],
        [decode(s, t, 4) for s, t in pairs[:16]]
        + [Chunk(last[0][4:7], 4, held(last[1], 6), samples=True, num_guesses=2)],
        [decode(s, t, 5) for s, t in pairs[:16]] + [decode(*last, 7)],
        [decode(s, t, 6) for s, t in pairs[:15]] + [Chunk(new[0][:5], 0, held(new[1], 4), True)],
        [decode(s, t, 7) for s, t in pairs[:15]],
    ]
    for step in steps:
        torch.testing.assert_close(
            compiled.forward(step), eager.forward(step), atol=1e-5, rtol=1e-5
        )
    assert ran == ["any_step"] * 4 + ["hidden_states"]
