"""The tiny Llama's own pieces, on small random models (the `tiny_llama` fixture).

Outside oracles where there is one: `torch.nn.functional.rms_norm` for RMSNorm, RoPE's
angles written out from the formula, parameter counts and KV bytes from the shapes.
What holds the pieces together is checked through the model's interfaces: logits are
`compute_logits` of `hidden_states`, a `KVStore` is asked for positions once per pass and
attends in every layer with them, and scores depend on distances only (RoPE), so the same
tokens at shifted positions give the same logits. Transformers' Llama as an oracle for the
whole model is tests/model/test_llama.py.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from safetensors import safe_open
from transformers import LlamaForCausalLM

from llmserve_ref.device import get_device
from llmserve_ref.kernels.grouped_attention import grouped_attention
from llmserve_ref.model import corpus
from llmserve_ref.model.generate import generate
from llmserve_ref.model.llama import Llama, RMSNorm, RotaryEmbedding, rotate_half
from llmserve_ref.model.llama_config import ModelConfig
from llmserve_ref.model.sampling import SamplingParams
from llmserve_ref.model.tokenizer import Tokenizer
from llmserve_ref.model.weights import DRAFT_DIR, TARGET_DIR

ATOL = 1e-5  # fp32


def tokens(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    """Token ids of the `tiny_llama` fixture's vocabulary (64)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 64, (batch, length), generator=g)


def test_model_errors_are_explicit(tiny_llama):
    with pytest.raises(ValueError, match="must be a multiple of num_key_value_heads"):
        ModelConfig(num_attention_heads=8, num_key_value_heads=3)
    model = tiny_llama()
    with pytest.raises(ValueError, match="max_position_embeddings is 64"):
        model(tokens(1, 65))
    with pytest.raises(ValueError, match=r"a cache of 65 positions is longer than .* \(64\)"):
        model.make_cache(1, 65)


# --- the model ---------------------------------------------------------------------------


def test_num_parameters_counts_a_tied_embedding_once(tiny_llama):
    V, H, inner, layers = 64, 64, 128, 2
    kv_dim = 2 * 16  # 2 K/V heads of 16 dims
    per_layer = 2 * H * H + 2 * H * kv_dim + 3 * H * inner + 2 * H  # q, o; k, v; MLP; 2 norms
    tied = V * H + layers * per_layer + H  # embedding (= lm_head), layers, final norm
    assert tiny_llama().num_parameters() == tied
    assert tiny_llama(tie_word_embeddings=False).num_parameters() == tied + V * H


def test_weights_start_normal_with_std_002_and_norms_at_one(tiny_llama):
    model = tiny_llama(hidden_size=256, intermediate_size=512, num_attention_heads=8)
    up = model.model["layers"][0].mlp.up_proj.weight  # 131072 draws
    assert abs(up.mean().item()) < 1e-3 and up.std().item() == pytest.approx(0.02, rel=0.02)
    assert torch.equal(model.model["norm"].weight, torch.ones(256))


@torch.no_grad()
def test_logits_are_compute_logits_of_hidden_states(tiny_llama):
    model, ids = tiny_llama(), tokens(2, 7)
    hidden = model.hidden_states(ids)
    assert hidden.shape == (2, 7, 64)
    logits = model(ids)
    assert torch.equal(logits, model.compute_logits(hidden))
    # An engine projects only the positions that sample: the last one here.
    torch.testing.assert_close(model.compute_logits(hidden[:, -1:]), logits[:, -1:])
    # Tied: the output head is the embedding matrix.
    embedding = model.model["embed_tokens"].weight
    torch.testing.assert_close(logits, hidden @ embedding.T, atol=ATOL, rtol=0)


@torch.no_grad()
def test_dtype_and_device_are_the_weights_and_the_cache_takes_them(tiny_llama):
    model = tiny_llama()
    assert (model.dtype, model.device) == (torch.float32, torch.device("cpu"))
    reference = model(tokens(1, 6))
    model = model.to(torch.bfloat16)
    assert model.dtype == torch.bfloat16
    cache = model.make_cache(1, 6)
    assert cache.keys[0].dtype == cache.values[1].dtype == torch.bfloat16
    logits = model(tokens(1, 6), cache)
    assert logits.dtype == torch.bfloat16
    torch.testing.assert_close(logits.float(), reference, atol=0.05, rtol=0.05)


class RecordingStore:
    """A `KVStore` that keeps nothing: records what the model asks and attends over the new
    keys only, at positions `offset ..`, with the causal mask of positions ``0 ..``."""

    def __init__(self, offset: int = 0) -> None:
        self.offset, self.asked, self.attended = offset, [], []

    def positions(self, num_tokens: int) -> torch.Tensor:
        positions = torch.arange(self.offset, self.offset + num_tokens)
        self.asked.append((num_tokens, positions))
        return positions

    def attend(self, layer, q, k, v, positions):
        self.attended.append((layer, positions))
        return grouped_attention(q, k, v, positions - self.offset)


@torch.no_grad()
def test_a_kv_store_is_asked_for_positions_once_and_used_by_every_layer(tiny_llama):
    model, store = tiny_llama(num_hidden_layers=3), RecordingStore()
    logits = model(tokens(2, 5), store)
    [(asked, positions)] = store.asked
    assert asked == 5 and positions.tolist() == [0, 1, 2, 3, 4]
    assert [layer for layer, _ in store.attended] == [0, 1, 2]
    assert all(p is positions for _, p in store.attended)  # one tensor: RoPE looks it up once
    torch.testing.assert_close(logits, model(tokens(2, 5)), atol=ATOL, rtol=0)


@torch.no_grad()
@pytest.mark.parametrize("offset", [1, 17, 59])
def test_rope_scores_depend_on_distance_only(tiny_llama, offset):
    """The same 5 tokens at positions offset .. offset + 4, attending only to each other,
    give the same logits as at 0 .. 4: every score is a function of i - j.

    In float64, but the angle tables are float32: the logits differ by up to 3e-8. A
    rotation that is not one (``x * cos`` alone) makes them differ by 1e-3.
    """
    model = tiny_llama().double()
    ids = tokens(1, 5)
    shifted = model(ids, RecordingStore(offset))
    torch.testing.assert_close(shifted, model(ids), atol=1e-6, rtol=0)
    assert not torch.allclose(model.rope.cos[offset], model.rope.cos[0])  # the angles moved


# --- the pieces ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_rmsnorm_is_torchs_rms_norm_computed_in_float32(dtype):
    g = torch.Generator().manual_seed(0)
    norm = RMSNorm(32, eps=1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(32, generator=g))
    x = (3 * torch.randn(4, 7, 32, generator=g)).to(dtype)
    expected = F.rms_norm(x.float(), (32,), eps=1e-5).to(dtype) * norm.weight
    torch.testing.assert_close(norm(x), expected)


def test_rotate_half_pairs_feature_i_with_feature_i_plus_half():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])  # (a, b) = (1, 2, 3), (4, 5, 6)
    assert rotate_half(x).tolist() == [-4.0, -5.0, -6.0, 1.0, 2.0, 3.0]


def test_rope_angles_are_position_times_theta_to_the_minus_2i_over_d():
    head_dim, theta = 8, 10000.0
    rope = RotaryEmbedding(head_dim, max_positions=50, theta=theta)
    for position in (0, 1, 7, 49):
        for i in range(head_dim // 2):
            angle = position * theta ** (-2 * i / head_dim)
            for j in (i, i + head_dim // 2):  # both features of pair i turn by one angle
                assert rope.cos[position, j].item() == pytest.approx(math.cos(angle), abs=1e-6)
                assert rope.sin[position, j].item() == pytest.approx(math.sin(angle), abs=1e-6)


def test_rope_rotates_each_pair_keeping_its_length():
    rope = RotaryEmbedding(8, max_positions=32, theta=10000.0)
    x = torch.randn(1, 2, 5, 8, generator=torch.Generator().manual_seed(4))
    out = rope(x, torch.tensor([0, 3, 9, 20, 31]))
    torch.testing.assert_close(out[:, :, 0], x[:, :, 0])  # position 0: no turn
    pair_length = lambda t: t[..., :4] ** 2 + t[..., 4:] ** 2  # noqa: E731
    torch.testing.assert_close(pair_length(out), pair_length(x))


# --- files ---------------------------------------------------------------------------------


@pytest.mark.parametrize("tied", [True, False])
def test_save_and_load_in_bfloat16(tiny_llama, tmp_path, tied):
    model = tiny_llama(tie_word_embeddings=tied)
    model.save_pretrained(tmp_path, dtype=torch.bfloat16)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["torch_dtype"] == "bfloat16" and config["tie_word_embeddings"] is tied
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as stored:
        names = set(stored.keys())
    assert ("lm_head.weight" in names) is not tied  # a tied head is stored once
    loaded = Llama.from_pretrained(tmp_path, "cpu")
    assert loaded.dtype == torch.float32 and not loaded.training
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor.bfloat16().float()), name
    assert (loaded.lm_head.weight is loaded.model["embed_tokens"].weight) is tied


# Against the outside oracle: Hugging Face `transformers` and its own LlamaForCausalLM.
# The committed weights load into it unchanged, and both implementations must agree:
# logits within ORACLE_ATOL in fp32 for prefill and for cached step-by-step decode, and
# the same 64 greedy tokens.

ORACLE_ATOL = 1e-4  # fp32 logits; observed differences are around 1e-6
DEVICE = get_device()
MODEL_DIRS = {"target": TARGET_DIR, "draft": DRAFT_DIR}


@pytest.fixture(scope="module", params=list(MODEL_DIRS))
def pair(request):
    """(ours, Hugging Face's) for the same committed directory, both fp32 on DEVICE."""
    directory = MODEL_DIRS[request.param]
    ours = Llama.from_pretrained(directory, DEVICE)
    theirs = LlamaForCausalLM.from_pretrained(directory, dtype=torch.float32).to(DEVICE).eval()
    return ours, theirs


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.from_file(TARGET_DIR)


@pytest.fixture(scope="module")
def heldout_ids(tokenizer):
    text = corpus.heldout_documents(3)[1]
    return torch.tensor([tokenizer.encode(text, add_bos=True)[:96]], device=DEVICE)


@torch.no_grad()
def test_prefill_logits_match(pair, heldout_ids):
    ours, theirs = pair
    torch.testing.assert_close(
        ours(heldout_ids), theirs(heldout_ids).logits, atol=ORACLE_ATOL, rtol=0
    )


@torch.no_grad()
def test_cached_decode_logits_match(pair, heldout_ids):
    ours, theirs = pair
    reference = theirs(heldout_ids).logits
    cache = ours.make_cache(1, heldout_ids.shape[1])
    steps = [ours(heldout_ids[:, :32], cache)]
    steps += [ours(heldout_ids[:, t : t + 1], cache) for t in range(32, heldout_ids.shape[1])]
    torch.testing.assert_close(torch.cat(steps, dim=1), reference, atol=ORACLE_ATOL, rtol=0)


def test_greedy_generation_matches(pair, tokenizer):
    ours, theirs = pair
    prompt = tokenizer.encode("Once upon a time, there was a brave", add_bos=True)
    greedy, eos = SamplingParams(temperature=0), {tokenizer.eos_id}
    mine = list(generate(ours, prompt, greedy, max_new_tokens=64, stop_token_ids=eos))
    hf = theirs.generate(
        torch.tensor([prompt], device=DEVICE),
        do_sample=False,
        max_new_tokens=64,
        eos_token_id=tokenizer.eos_id,
        pad_token_id=tokenizer.eos_id,
    )
    assert len(mine) == 64  # a story is longer than 64 tokens: no early stop
    assert mine == hf[0, len(prompt) :].tolist()


@pytest.mark.parametrize("name", list(MODEL_DIRS))
def test_config_json_is_a_llama_config(name):
    config = json.loads((MODEL_DIRS[name] / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["model_type"] == "llama"
    tokenizer = Tokenizer.from_file(MODEL_DIRS[name])
    assert (config["bos_token_id"], config["eos_token_id"]) == (tokenizer.bos_id, tokenizer.eos_id)
    assert config["vocab_size"] == tokenizer.vocab_size
    assert config["num_key_value_heads"] < config["num_attention_heads"]  # GQA / MQA exercised


def test_save_pretrained_round_trips(tmp_path):
    model = Llama.from_pretrained(DRAFT_DIR, "cpu")
    model.save_pretrained(tmp_path)
    again = Llama.from_pretrained(tmp_path, "cpu")
    theirs = again.state_dict()
    assert model.state_dict().keys() == theirs.keys()
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, theirs[name]), name
    assert again.lm_head.weight is again.model["embed_tokens"].weight  # still tied
