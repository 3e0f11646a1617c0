"""Retrain the tiny target and draft models from nothing, reproducibly, in minutes.

``python -m llmserve_ref.model.train`` is the one command. It writes the corpus
(`llmserve_ref.model.corpus`), trains the byte-level BPE tokenizer on it, then trains
two Llama-architecture models on the same token stream:

* the **target** (~3M parameters: 4 layers, hidden 256, 8 query heads sharing
  2 K/V heads), the model the pages sample from;
* the **draft** (~0.5M parameters: 2 layers, hidden 128, 4 query heads sharing
  1 K/V head), a much cheaper guesser for speculative decoding.

Each lands in ``src/llmserve_ref/data/models/<name>/`` with ``config.json``,
``model.safetensors`` (stored in bfloat16 to keep the files small), the
tokenizer files and ``training.json`` (losses, seconds, parameter count, seeds).
Training is next-token cross-entropy on random 256-token windows of the
concatenated documents, in float32, with AdamW, warmup and cosine decay.
Everything random is seeded and the thread count is fixed, so on the same
machine and torch version the same command gives bit-identical weights.
``--steps N`` shortens the schedule (tests use it); ``--documents N`` shrinks
the corpus.

>>> schedule = TrainConfig(steps=100, warmup=10, lr=1e-3)
>>> [round(learning_rate(schedule, s), 6) for s in (0, 9, 10, 99)]
[0.0001, 0.001, 0.001, 0.0001]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F

from llmserve_ref.model import corpus
from llmserve_ref.model.llama import Llama
from llmserve_ref.model.llama_config import ModelConfig
from llmserve_ref.model.tokenizer import Tokenizer
from llmserve_ref.model.weights import MODELS_DIR

VOCAB_SIZE = 1024  # BPE's target; it stops early (at 948) when no pair is left to merge
SEQ_LEN = 256
NUM_THREADS = 2
STORAGE_DTYPE = torch.bfloat16  # halves the committed files; training is in float32

# vocab_size is set from the trained tokenizer, so every logit is a real token.
TARGET = ModelConfig(
    hidden_size=256,
    intermediate_size=688,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=2,
    max_position_embeddings=SEQ_LEN,
)
DRAFT = ModelConfig(
    hidden_size=128,
    intermediate_size=344,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=1,
    max_position_embeddings=SEQ_LEN,
)


@dataclass(frozen=True)
class TrainConfig:
    """The optimisation schedule of one model."""

    steps: int = 300
    batch_size: int = 16
    seq_len: int = SEQ_LEN
    lr: float = 3e-3
    warmup: int = 20
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = 0


SCHEDULES = {
    "target": (TARGET, TrainConfig(steps=300, seed=1)),
    "draft": (DRAFT, TrainConfig(steps=150, lr=5e-3, seed=2)),
}


def learning_rate(cfg: TrainConfig, step: int) -> float:
    """Linear warmup to `cfg.lr`, then cosine decay to a tenth of it at the last step."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - 1 - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train_tokenizer(documents: list[str]) -> Tokenizer:
    """Byte-level BPE with at most `VOCAB_SIZE` tokens, learned from `documents`."""
    # The special-token strings in chat documents are not text to learn merges from.
    plain = (re.sub(r"<\|\w+\|>", "\n", doc) for doc in documents)
    return Tokenizer.train(plain, vocab_size=VOCAB_SIZE)


def token_stream(tokenizer: Tokenizer, documents: list[str]) -> torch.Tensor:
    """All documents as one 1-D tensor of ids, each as ``<|bos|> ... <|eos|>``."""
    ids: list[int] = []
    for doc in documents:
        ids += [tokenizer.bos_id, *tokenizer.encode(doc), tokenizer.eos_id]
    return torch.tensor(ids, dtype=torch.long)


def random_windows(
    stream: torch.Tensor, batch_size: int, seq_len: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """`batch_size` random windows: inputs and the same tokens shifted by one (targets)."""
    starts = torch.randint(0, len(stream) - seq_len - 1, (batch_size,), generator=generator)
    windows = torch.stack([stream[s : s + seq_len + 1] for s in starts.tolist()])
    return windows[:, :-1], windows[:, 1:]


def next_token_loss(model: Llama, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of predicting each next token."""
    logits = model(inputs)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


@torch.no_grad()
def evaluate(model: Llama, stream: torch.Tensor, seq_len: int, batch_size: int = 16) -> float:
    """Mean next-token loss over consecutive, non-overlapping windows of `stream`."""
    model.eval()
    n = (len(stream) - 1) // seq_len
    inputs = stream[: n * seq_len].view(n, seq_len)
    targets = stream[1 : n * seq_len + 1].view(n, seq_len)
    total = 0.0
    for i in range(0, n, batch_size):
        rows = slice(i, i + batch_size)
        total += next_token_loss(model, inputs[rows], targets[rows]).item() * len(inputs[rows])
    model.train()
    return total / n


def train_model(
    config: ModelConfig, schedule: TrainConfig, train: torch.Tensor
) -> tuple[Llama, dict]:
    """Train one model from a seeded initialisation; return it and its training record."""
    torch.manual_seed(schedule.seed)
    model = Llama(config).to("cpu").train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": schedule.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=schedule.lr,
        betas=(0.9, 0.95),
    )
    data_order = torch.Generator().manual_seed(schedule.seed)
    start, losses = time.perf_counter(), []
    for step in range(schedule.steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(schedule, step)
        inputs, targets = random_windows(train, schedule.batch_size, schedule.seq_len, data_order)
        loss = next_token_loss(model, inputs, targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), schedule.grad_clip)
        optimizer.step()
        losses.append(loss.item())
        if step % 20 == 0 or step == schedule.steps - 1:
            print(f"  step {step:4d}  loss {loss.item():.4f}", file=sys.stderr, flush=True)
    record = {
        "parameters": model.num_parameters(),
        "train_loss": sum(losses[-20:]) / len(losses[-20:]),
        "train_seconds": round(time.perf_counter() - start, 1),
        "tokens_seen": schedule.steps * schedule.batch_size * schedule.seq_len,
        "schedule": asdict(schedule),
    }
    return model.eval(), record


def train_all(
    out_dir: Path = MODELS_DIR,
    steps: int | None = None,
    documents: int = 20_000,
    heldout_documents: int = 500,
) -> dict[str, dict]:
    """Corpus → tokenizer → target and draft, written under `out_dir`. Returns the records."""
    torch.set_num_threads(NUM_THREADS)
    start = time.perf_counter()
    train_docs = corpus.train_documents(documents)
    heldout_docs = corpus.heldout_documents(heldout_documents)
    tokenizer = train_tokenizer(train_docs)
    train, heldout = token_stream(tokenizer, train_docs), token_stream(tokenizer, heldout_docs)
    print(f"corpus: {len(train):,} training tokens, {len(heldout):,} held out", file=sys.stderr)
    records = {}
    for name, (config, schedule) in SCHEDULES.items():
        schedule = replace(schedule, steps=steps) if steps is not None else schedule
        config = replace(
            config,
            vocab_size=tokenizer.vocab_size,
            bos_token_id=tokenizer.bos_id,
            eos_token_id=tokenizer.eos_id,
        )
        print(f"training {name}", file=sys.stderr)
        model, record = train_model(config, schedule, train)
        directory = Path(out_dir) / name
        model.save_pretrained(directory, STORAGE_DTYPE)
        # The held-out loss of the weights as stored, rounded to bfloat16.
        saved = Llama.from_pretrained(directory, "cpu")
        record.update(
            heldout_loss=evaluate(saved, heldout, schedule.seq_len),
            storage_dtype=str(STORAGE_DTYPE).removeprefix("torch."),
            corpus={
                "train_seed": corpus.TRAIN_SEED,
                "heldout_seed": corpus.HELDOUT_SEED,
                "train_documents": len(train_docs),
                "heldout_documents": len(heldout_docs),
                "train_tokens": len(train),
                "heldout_tokens": len(heldout),
            },
            torch_version=torch.__version__,
            num_threads=NUM_THREADS,
        )
        tokenizer.save_pretrained(directory)
        (directory / "training.json").write_text(json.dumps(record, indent=2) + "\n")
        records[name] = record
    print(f"done in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return records


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=MODELS_DIR, help="where to write the models")
    parser.add_argument("--steps", type=int, help="train each model this many steps instead")
    parser.add_argument("--documents", type=int, default=20_000, help="training documents")
    parser.add_argument("--heldout-documents", type=int, default=500, help="held-out documents")
    args = parser.parse_args(argv)
    records = train_all(args.out, args.steps, args.documents, args.heldout_documents)
    for name, r in records.items():
        print(
            f"{name}: {r['parameters']:,} parameters, train loss {r['train_loss']:.4f}, "
            f"held-out loss {r['heldout_loss']:.4f}, {r['train_seconds']} s"
        )


if __name__ == "__main__":
    main()
