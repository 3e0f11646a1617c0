"""The two shipped models: where they live, what loading gives, and what they are.

The figures the module's docstring states (a target of about 3M parameters with 8 query
heads on 2 K/V heads, a draft of about 0.5M, one tokenizer shared) are checked on the
committed files; that the weights reproduce their recorded loss is tests/model/test_train.py's.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from safetensors import safe_open

from llmserve_ref.model import llama
from llmserve_ref.model.corpus import heldout_documents
from llmserve_ref.model.llama import Llama
from llmserve_ref.model.tokenizer import Tokenizer
from llmserve_ref.model.weights import (
    DRAFT_DIR,
    MODEL_DIRS,
    MODELS_DIR,
    TARGET_DIR,
    load,
    load_draft,
    load_target,
)

FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


@pytest.fixture(scope="module")
def target():
    return load_target("cpu")


@pytest.fixture(scope="module")
def draft():
    return load_draft("cpu")


def test_the_served_names_are_the_two_shipped_directories():
    assert MODEL_DIRS == {"tiny": TARGET_DIR, "tiny-draft": DRAFT_DIR}
    for directory in MODEL_DIRS.values():
        assert directory.parent == MODELS_DIR
        for name in FILES:
            assert (directory / name).is_file(), directory / name


def test_loading_gives_a_model_ready_to_run_and_its_tokenizer(target):
    model, tokenizer = target
    assert isinstance(model, Llama) and isinstance(tokenizer, Tokenizer)
    assert not model.training  # eval mode
    assert (model.device, model.dtype) == (torch.device("cpu"), torch.float32)
    assert tokenizer.vocab_size == model.config.vocab_size
    assert (tokenizer.bos_id, tokenizer.eos_id) == (
        model.config.bos_token_id,
        model.config.eos_token_id,
    )


def test_the_device_defaults_to_get_device(monkeypatch):
    """No device given: `get_device()`'s, here a stand-in that names the meta device."""
    monkeypatch.setattr(llama, "get_device", lambda: torch.device("meta"))
    model, _ = load(DRAFT_DIR)
    assert model.device == torch.device("meta")
    assert load(DRAFT_DIR, "cpu")[0].device == torch.device("cpu")


def test_the_target_and_the_draft_are_the_sizes_stated(target, draft):
    t, d = target[0], draft[0]
    assert (t.config.num_attention_heads, t.config.num_key_value_heads) == (8, 2)
    assert 2.5e6 < t.num_parameters() < 3.5e6  # "~3M parameters"
    assert 0.4e6 < d.num_parameters() < 0.6e6  # "~0.5M"


def test_the_target_and_the_draft_share_one_tokenizer(target, draft):
    assert target[1].backend.to_str() == draft[1].backend.to_str()
    assert (TARGET_DIR / "tokenizer.json").read_bytes() == (
        DRAFT_DIR / "tokenizer.json"
    ).read_bytes()
    assert target[0].config.vocab_size == draft[0].config.vocab_size


@pytest.mark.parametrize("directory", [TARGET_DIR, DRAFT_DIR], ids=["target", "draft"])
def test_weights_are_stored_in_bfloat16_and_loaded_exactly(directory):
    """bfloat16 on disk halves the files; float32 holds every bfloat16 value exactly."""
    model, _ = load(directory, "cpu")
    loaded = model.state_dict()
    with safe_open(str(directory / "model.safetensors"), "pt") as stored:
        names = list(stored.keys())
        assert "lm_head.weight" not in names  # tied to the embedding, stored once
        for name in names:
            tensor = stored.get_tensor(name)
            assert tensor.dtype == torch.bfloat16, name
            assert torch.equal(loaded[name], tensor.float()), name
    assert model.lm_head.weight is model.model["embed_tokens"].weight


@torch.no_grad()
def test_the_draft_guesses_most_of_the_targets_greedy_tokens(target, draft):
    """What a draft is for: on held-out stories its greedy next token is the target's most
    of the time (three times in four with the committed weights)."""
    model, tokenizer = target
    ids = torch.tensor([tokenizer.encode(" ".join(heldout_documents(5)), add_bos=True)[:256]])
    agree = (model(ids).argmax(-1) == draft[0](ids).argmax(-1)).float().mean().item()
    assert 0.6 < agree < 1.0


def test_finding_the_models_and_their_tokenizer_imports_no_torch():
    """A benchmark client needs where the models live and their tokenizer, not torch."""
    code = (
        "import sys\n"
        "from llmserve_ref.model.weights import MODEL_DIRS\n"
        "from llmserve_ref.model.tokenizer import Tokenizer\n"
        "Tokenizer.from_file(MODEL_DIRS['tiny']).encode('Once upon a time')\n"
        "print('torch' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False"]
