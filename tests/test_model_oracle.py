"""Hugging Face `transformers` as the oracle for our Llama, its files and its tokenizer.

The committed weights load into ``transformers.LlamaForCausalLM`` unchanged, and
both implementations must agree: logits within ATOL in fp32 for prefill and for
cached step-by-step decode, the same 64 greedy tokens, and the same token ids
from the tokenizer that ``AutoTokenizer`` builds out of our ``tokenizer.json``.
"""

import json

import pytest
import torch
from transformers import AutoTokenizer, LlamaForCausalLM, PreTrainedTokenizerFast

from llmserve_ref.device import get_device
from llmserve_ref.model import corpus
from llmserve_ref.model.generate import generate
from llmserve_ref.model.llama import Llama
from llmserve_ref.model.sampling import SamplingParams
from llmserve_ref.model.tokenizer import Tokenizer
from llmserve_ref.model.weights import DRAFT_DIR, TARGET_DIR

ATOL = 1e-4  # fp32 logits; observed differences are around 1e-6
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
    torch.testing.assert_close(ours(heldout_ids), theirs(heldout_ids).logits, atol=ATOL, rtol=0)


@torch.no_grad()
def test_cached_decode_logits_match(pair, heldout_ids):
    ours, theirs = pair
    reference = theirs(heldout_ids).logits
    cache = ours.make_cache(1, heldout_ids.shape[1])
    steps = [ours(heldout_ids[:, :32], cache)]
    steps += [ours(heldout_ids[:, t : t + 1], cache) for t in range(32, heldout_ids.shape[1])]
    torch.testing.assert_close(torch.cat(steps, dim=1), reference, atol=ATOL, rtol=0)


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


def test_hf_tokenizer_agrees_with_ours(tokenizer):
    hf = AutoTokenizer.from_pretrained(TARGET_DIR)
    fast = PreTrainedTokenizerFast(tokenizer_file=str(TARGET_DIR / "tokenizer.json"))
    assert (hf.bos_token_id, hf.eos_token_id) == (tokenizer.bos_id, tokenizer.eos_id)
    assert len(hf) == tokenizer.vocab_size
    for text in [*corpus.heldout_documents(20), "naïve café — “你好” 🙂 Jürgen"]:
        ids = tokenizer.encode(text)
        assert hf.encode(text, add_special_tokens=False) == ids
        assert fast.encode(text, add_special_tokens=False) == ids
        assert hf(text).input_ids == [tokenizer.bos_id, *ids]
        assert hf.decode(ids) == fast.decode(ids) == tokenizer.decode(ids) == text


def test_chat_template_writes_the_training_format():
    hf = AutoTokenizer.from_pretrained(TARGET_DIR)
    messages = [{"role": "user", "content": "Tell me a story about a fox named Mia."}]
    text = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "<|bos|><|user|>Tell me a story about a fox named Mia.<|assistant|>"


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
