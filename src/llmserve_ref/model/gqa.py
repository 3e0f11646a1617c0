"""From multi-head to grouped-query attention: mean-pool the K/V heads, then uptrain briefly.

Grouped-query attention (GQA) lets a group of query heads share one key/value
head, so the KV cache shrinks by the group size. Ainslie et al. (2023, "GQA:
Training Generalized Multi-Query Transformer Models from Multi-Head
Checkpoints") showed that a model trained with multi-head attention (MHA) need
not be retrained from scratch: replace each group's key and value projection
heads by their **mean** (better than keeping one head or starting afresh, in
their ablation), then **uptrain** the converted model for a small fraction of
its original training (5% in the paper) so it adapts to the shared heads.

* `mean_pool_kv_heads` builds the converted model; every other weight is copied.
* `uptrain` continues training it on the same kind of text.
* `shared_kv_attention` is decode attention that reads each K/V head once for
  its whole group; `repeated_kv_attention` first copies each head once per
  query head (`repeat_kv`, as Hugging Face's eager path does). Both compute
  the same thing, but only the first turns a smaller cache into less memory
  traffic per decode step.

``python -m llmserve_ref.model.gqa --train-mha`` trains the small MHA checkpoint the
pages convert (8 query heads, 8 K/V heads; seeded, about two minutes on two CPU
cores) into ``src/llmserve_ref/data/models/mha/``, with the project's tokenizer.

>>> import torch
>>> from llmserve_ref.model.llama import Llama
>>> from llmserve_ref.model.llama_config import ModelConfig
>>> _ = torch.manual_seed(0)
>>> mha = Llama(ModelConfig(vocab_size=32, hidden_size=32, intermediate_size=64,
...     num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4)).to("cpu")
>>> gqa = mean_pool_kv_heads(mha, 2)
>>> gqa.config.num_key_value_heads, tuple(gqa.model["layers"][0].self_attn.k_proj.weight.shape)
(2, (16, 32))
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import torch

from llmserve_ref.model import corpus
from llmserve_ref.model.llama import Llama
from llmserve_ref.model.llama_config import ModelConfig
from llmserve_ref.model.tokenizer import Tokenizer
from llmserve_ref.model.train import (
    NUM_THREADS,
    SEQ_LEN,
    STORAGE_DTYPE,
    TrainConfig,
    evaluate,
    next_token_loss,
    random_windows,
    token_stream,
    train_model,
)
from llmserve_ref.model.weights import MODELS_DIR, TARGET_DIR

MHA_DIR = MODELS_DIR / "mha"
# The draft's size, but multi-head: each of the 8 query heads has its own K/V head.
MHA = ModelConfig(
    hidden_size=128,
    intermediate_size=344,
    num_hidden_layers=2,
    num_attention_heads=8,
    num_key_value_heads=8,
    max_position_embeddings=SEQ_LEN,
)
MHA_SCHEDULE = TrainConfig(steps=150, seq_len=128, lr=5e-3, seed=3)


# --8<-- [start:mean_pool]
@torch.no_grad()
def mean_pool_kv_heads(model: Llama, num_kv_heads: int) -> Llama:
    """A copy of `model` with `num_kv_heads` K/V heads, each the mean of a group of its heads.

    Query head i reads K/V head ``i // group``, so K/V heads ``j*g .. j*g+g-1`` of
    the old model (g = old K/V heads // `num_kv_heads`) served exactly the query
    heads that new head j serves, and they are averaged into it.
    """
    config = model.config
    heads, head_dim = config.num_key_value_heads, config.head_dim
    if num_kv_heads < 1 or heads % num_kv_heads:
        choices = ", ".join(str(n) for n in range(1, heads + 1) if heads % n == 0)
        raise ValueError(
            f"num_kv_heads={num_kv_heads} must divide the model's {heads} key/value heads, "
            f"so that every new head is the mean of a whole group; choose one of {choices}"
        )
    pooled = Llama(replace(config, num_key_value_heads=num_kv_heads))
    state = model.state_dict()
    for name, weight in state.items():
        if name.endswith(("k_proj.weight", "v_proj.weight")):  # [heads * head_dim, hidden]
            groups = weight.view(num_kv_heads, heads // num_kv_heads, head_dim, -1)
            state[name] = groups.mean(dim=1).flatten(0, 1)
    pooled.load_state_dict(state)
    return pooled.to(model.device, model.dtype).eval()


# --8<-- [end:mean_pool]


# --8<-- [start:uptrain]
def uptrain(
    model: Llama,
    stream: torch.Tensor,
    steps: int,
    batch_size: int = 8,
    seq_len: int = 128,
    lr: float = 1e-3,
    seed: int = 0,
) -> list[float]:
    """Train `model` in place for `steps` AdamW steps on random windows of `stream`.

    The learning rate is constant after a short warmup: a converted model starts
    close to a good solution, so it needs a gentle nudge, not a schedule from
    scratch. Returns the training loss of every step.
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    torch.manual_seed(seed)
    data_order = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95))
    warmup = max(1, steps // 10)
    model.train()
    losses = []
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = lr * min(1.0, (step + 1) / warmup)
        inputs, targets = random_windows(stream, batch_size, seq_len, data_order)
        loss = next_token_loss(model, inputs.to(model.device), targets.to(model.device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return losses


# --8<-- [end:uptrain]


# --8<-- [start:attention]
def repeat_kv(k: torch.Tensor, group: int) -> torch.Tensor:
    """``[b, kv, S, d]`` → ``[b, kv * group, S, d]``: each head once per query head.

    As Hugging Face's Llama does it: expand (free), then reshape, which copies when
    there are several K/V heads. With one K/V head the reshape is still a view (the
    head axis has stride 0), and the copy happens later, inside the matmul that reads it.
    """
    if group == 1:
        return k
    batch, kv_heads, length, d = k.shape
    expanded = k[:, :, None].expand(batch, kv_heads, group, length, d)
    return expanded.reshape(batch, kv_heads * group, length, d)


def repeated_kv_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Decode attention, ``q`` ``[b, heads, 1, d]`` over all of ``k``, ``v`` ``[b, kv, S, d]``.

    Copies each K/V head for every query head of its group first (Hugging Face's
    eager path does this), then attends as multi-head attention would.
    """
    group = q.shape[1] // k.shape[1]
    k, v = repeat_kv(k, group), repeat_kv(v, group)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # [b, heads, 1, S]
    return scores.softmax(dim=-1) @ v


def shared_kv_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The same result, reading each K/V head once for its whole group.

    The group's query heads become the rows of one matrix, ``[b, kv, group, d]``,
    that multiplies its K/V head: no copy, and each cached byte is read once.
    """
    batch, heads, _, d = q.shape
    kv_heads = k.shape[1]
    rows = q.view(batch, kv_heads, heads // kv_heads, d)
    scores = rows @ k.transpose(-1, -2) / math.sqrt(d)  # [b, kv, group, S]
    return (scores.softmax(dim=-1) @ v).view(batch, heads, 1, d)


# --8<-- [end:attention]


def train_mha(out_dir: Path = MHA_DIR, steps: int | None = None) -> dict:
    """Train the multi-head checkpoint on the project's corpus and write it to `out_dir`."""
    torch.set_num_threads(NUM_THREADS)
    tokenizer = Tokenizer.from_file(TARGET_DIR)
    train = token_stream(tokenizer, corpus.train_documents())
    heldout = token_stream(tokenizer, corpus.heldout_documents())
    schedule = replace(MHA_SCHEDULE, steps=steps) if steps is not None else MHA_SCHEDULE
    config = replace(
        MHA,
        vocab_size=tokenizer.vocab_size,
        bos_token_id=tokenizer.bos_id,
        eos_token_id=tokenizer.eos_id,
    )
    model, record = train_model(config, schedule, train)
    model.save_pretrained(out_dir, STORAGE_DTYPE)
    saved = Llama.from_pretrained(out_dir, "cpu")
    record.update(
        heldout_loss=evaluate(saved, heldout, schedule.seq_len),
        storage_dtype=str(STORAGE_DTYPE).removeprefix("torch."),
        torch_version=torch.__version__,
        num_threads=NUM_THREADS,
    )
    tokenizer.save_pretrained(out_dir)
    (Path(out_dir) / "training.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--train-mha",
        action="store_true",
        required=True,
        help="train the multi-head checkpoint that the MQA/GQA page converts",
    )
    parser.add_argument("--out", type=Path, default=MHA_DIR, help="where to write it")
    parser.add_argument("--steps", type=int, help="train this many steps instead")
    args = parser.parse_args(argv)
    record = train_mha(args.out, args.steps)
    print(
        f"mha: {record['parameters']:,} parameters, train loss {record['train_loss']:.4f}, "
        f"held-out loss {record['heldout_loss']:.4f}, {record['train_seconds']} s",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
