"""The GGUF export, read back two ways: with gguf's own reader (every tensor and tokenizer
field against the source) and with transformers' GGUF loader, an independent implementation
of llama.cpp's conventions (it undoes the Q/K permutation itself)."""

from __future__ import annotations

import json

import gguf
import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

from llmserve_ref.model.gguf_export import OLLAMA_TEMPLATE, export, modelfile, permute, unpermute
from llmserve_ref.model.tokenizer import CHAT_TEMPLATE
from llmserve_ref.model.weights import TARGET_DIR, load_target

TEXT = "Once upon a time, Zoé found “你好” 🙂 in the café."


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    export(path)
    return path


@pytest.fixture(scope="module")
def source():
    return load_target("cpu")


def field(reader: gguf.GGUFReader, key: str):
    return reader.fields[key].contents()


def test_permute_pairs_the_halves_and_unpermute_inverts_it():
    w = torch.randn(64, 3)  # 1, 2 or 8 heads of head_dim 64, 32 or 8
    for heads in (1, 2, 8):
        assert torch.equal(unpermute(permute(w, heads), heads), w)
    one_head = torch.arange(8.0).view(8, 1)
    assert permute(one_head, 1).flatten().tolist() == [0, 4, 1, 5, 2, 6, 3, 7]


def test_metadata_describes_the_llama_architecture(exported, source):
    model, _ = source
    c = model.config
    reader = gguf.GGUFReader(exported)
    assert field(reader, "general.architecture") == "llama"
    expected = {
        "llama.context_length": c.max_position_embeddings,
        "llama.embedding_length": c.hidden_size,
        "llama.block_count": c.num_hidden_layers,
        "llama.feed_forward_length": c.intermediate_size,
        "llama.attention.head_count": c.num_attention_heads,
        "llama.attention.head_count_kv": c.num_key_value_heads,
        "llama.rope.dimension_count": c.head_dim,
        "llama.vocab_size": c.vocab_size,
    }
    assert {key: field(reader, key) for key in expected} == expected
    assert field(reader, "llama.rope.freq_base") == pytest.approx(c.rope_theta)
    assert field(reader, "llama.attention.layer_norm_rms_epsilon") == pytest.approx(c.rms_norm_eps)


def test_every_tensor_matches_the_source_after_undoing_the_permutation(exported, source):
    model, _ = source
    c = model.config
    reader = gguf.GGUFReader(exported)
    stored = {t.name: np.asarray(t.data) for t in reader.tensors}
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, c.num_hidden_layers)
    state = model.state_dict()
    del state["lm_head.weight"]  # tied to the embedding; llama.cpp reuses token_embd
    assert len(stored) == len(state)
    for name, tensor in state.items():
        gguf_name = names.get_name(name, try_suffixes=(".weight",))
        data = torch.from_numpy(stored[gguf_name].copy()).reshape(tensor.shape)
        assert data.dtype == torch.float32
        heads = {"q_proj": c.num_attention_heads, "k_proj": c.num_key_value_heads}
        for proj, num_heads in heads.items():
            if proj in name:
                assert not torch.equal(data, tensor)  # stored in llama.cpp's row order
                data = unpermute(data, num_heads)
        assert torch.equal(data, tensor), name


def test_the_tokenizer_fields_match_the_source(exported, source):
    _, tokenizer = source
    reader = gguf.GGUFReader(exported)
    spec = json.loads((TARGET_DIR / "tokenizer.json").read_text())
    vocab = sorted(spec["model"]["vocab"], key=spec["model"]["vocab"].get)
    assert field(reader, "tokenizer.ggml.model") == "gpt2"
    assert field(reader, "tokenizer.ggml.tokens") == vocab
    assert field(reader, "tokenizer.ggml.merges") == [" ".join(p) for p in spec["model"]["merges"]]
    types = field(reader, "tokenizer.ggml.token_type")
    assert [i for i, t in enumerate(types) if t == gguf.TokenType.CONTROL] == [0, 1, 2, 3]
    assert field(reader, "tokenizer.ggml.bos_token_id") == tokenizer.bos_id
    assert field(reader, "tokenizer.ggml.eos_token_id") == tokenizer.eos_id
    assert field(reader, "tokenizer.chat_template") == CHAT_TEMPLATE


def test_the_bos_and_eos_flags_are_what_llama_cpps_converter_reads_from_the_source(exported):
    """llama.cpp's converter (gguf's SpecialVocab) reads add_bos_token from tokenizer.json's
    post-processor, which puts <|bos|> first as our server does: llama.cpp must do the same."""
    reader = gguf.GGUFReader(exported)
    converter = gguf.SpecialVocab(TARGET_DIR, load_merges=False)
    assert field(reader, "tokenizer.ggml.add_bos_token") is converter.add_special_token["bos"]
    assert field(reader, "tokenizer.ggml.add_bos_token") is True
    assert field(reader, "tokenizer.ggml.add_eos_token") is converter.add_special_token.get(
        "eos", False
    )


def test_transformers_reads_back_the_same_weights_and_tokenizer(exported, source):
    model, tokenizer = source
    config = json.loads((TARGET_DIR / "config.json").read_text())
    oracle = LlamaForCausalLM(LlamaConfig(**config))
    loaded = load_gguf_checkpoint(str(exported), return_tensors=True, model_to_load=oracle)
    state = model.state_dict()
    for name, tensor in loaded["tensors"].items():
        assert torch.equal(torch.as_tensor(tensor), state[name]), name
    hf_tokenizer = AutoTokenizer.from_pretrained(exported.parent, gguf_file=exported.name)
    assert hf_tokenizer(TEXT, add_special_tokens=False).input_ids == tokenizer.encode(TEXT)
    assert hf_tokenizer.decode(tokenizer.encode(TEXT)) == TEXT


def test_the_modelfile_names_the_file_and_the_template():
    text = modelfile("out/tiny.gguf")
    assert text.splitlines()[0] == "FROM ./tiny.gguf"
    assert f'TEMPLATE """{OLLAMA_TEMPLATE}"""' in text
    assert 'PARAMETER stop "<|eos|>"' in text
