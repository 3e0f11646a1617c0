"""Training is reproducible, and the committed models are what their records say.

A full retrain takes minutes (``python -m llmserve_ref.model.train``), so the suite
checks the pieces instead: a shortened run is bit-identical when repeated, the
committed tokenizer is exactly what training on the corpus gives, and the
committed weights reproduce the held-out loss written in ``training.json``.
"""

import json

import pytest
import torch

from llmserve_ref.model import corpus
from llmserve_ref.model.llama import Llama
from llmserve_ref.model.tokenizer import Tokenizer
from llmserve_ref.model.train import (
    SCHEDULES,
    SEQ_LEN,
    evaluate,
    token_stream,
    train_all,
    train_tokenizer,
)
from llmserve_ref.model.weights import DRAFT_DIR, MODELS_DIR, TARGET_DIR

DIRS = {"target": TARGET_DIR, "draft": DRAFT_DIR}


@pytest.mark.slow
def test_short_runs_with_the_same_seed_are_bit_identical(tmp_path):
    runs = [tmp_path / "a", tmp_path / "b"]
    records = [train_all(run, steps=2, documents=200, heldout_documents=10) for run in runs]
    for name in DIRS:
        for file in ("model.safetensors", "tokenizer.json", "config.json"):
            assert (runs[0] / name / file).read_bytes() == (runs[1] / name / file).read_bytes()
        for key in ("train_loss", "heldout_loss", "parameters"):
            assert records[0][name][key] == records[1][name][key]
    # And training did move the weights away from their seeded initialisation.
    trained = Llama.from_pretrained(runs[0] / "draft", "cpu")
    torch.manual_seed(SCHEDULES["draft"][1].seed)
    initial = Llama(trained.config).lm_head.weight.detach().bfloat16().float()
    assert (trained.lm_head.weight != initial).float().mean() > 0.5


def test_committed_tokenizer_is_what_training_on_the_corpus_gives():
    fresh = train_tokenizer(corpus.train_documents())
    for directory in DIRS.values():
        assert Tokenizer.from_file(directory).backend.to_str() == fresh.backend.to_str()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(DIRS))
def test_committed_weights_give_the_recorded_heldout_loss(name):
    record = json.loads((DIRS[name] / "training.json").read_text())
    model = Llama.from_pretrained(DIRS[name], "cpu")
    tokenizer = Tokenizer.from_file(DIRS[name])
    heldout = corpus.heldout_documents(record["corpus"]["heldout_documents"])
    loss = evaluate(model, token_stream(tokenizer, heldout), SEQ_LEN)
    assert loss == pytest.approx(record["heldout_loss"], abs=1e-4)
    assert record["parameters"] == model.num_parameters()


def test_models_are_small_and_the_draft_is_much_smaller():
    records = {n: json.loads((d / "training.json").read_text()) for n, d in DIRS.items()}
    assert 1_000_000 < records["target"]["parameters"] <= 4_000_000
    assert records["draft"]["parameters"] * 4 < records["target"]["parameters"]
    assert records["target"]["heldout_loss"] < records["draft"]["heldout_loss"]
    size = sum(f.stat().st_size for f in MODELS_DIR.rglob("*") if f.is_file())
    assert size < 20 * 2**20
