"""Export the tiny target model to GGUF, the file llama.cpp and Ollama run.

GGUF is one file: key-value metadata (architecture, shapes, RoPE base, the
tokenizer: tokens, merges, special ids, chat template), then the tensors under
llama.cpp's names (``blk.0.attn_q.weight`` for ``model.layers.0.self_attn.q_proj.weight``).
We write it with the ``gguf`` package, the one llama.cpp's own converter uses,
and take the tensor names from its map. ``gguf`` is an extra (``serving``): it is
imported by the functions that write the file, so the rest of the model layer
never needs it.

One detail is easy to get wrong. Hugging Face's Llama rotates feature ``i``
with feature ``i + head_dim/2`` (`llmserve_ref.model.llama.rotate_half`); llama.cpp's
"llama" architecture rotates adjacent pairs ``(2i, 2i+1)``. Its converter
therefore reorders the rows of every head of ``q_proj`` and ``k_proj`` so that
the same pairs meet: `permute` does the same, and `unpermute` undoes it (a test
checks the round trip and every tensor in the file).

    python -m llmserve_ref.model.gguf_export tiny.gguf   # also writes Modelfile beside it

>>> import torch
>>> w = torch.arange(8.0).view(8, 1)  # one head of head_dim 8, one input feature
>>> permute(w, num_heads=1).flatten().tolist()
[0.0, 4.0, 1.0, 5.0, 2.0, 6.0, 3.0, 7.0]
>>> torch.equal(unpermute(permute(w, 1), 1), w)
True
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from llmserve_ref.model.tokenizer import CHAT_TEMPLATE, EOS, USER
from llmserve_ref.model.weights import TARGET_DIR, load


# --8<-- [start:permute]
def permute(w: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Reorder each head's rows from halves (i, i + d/2) to pairs (2i, 2i+1), as llama.cpp's
    ``convert_hf_to_gguf.py`` does for q_proj (query heads) and k_proj (KV heads)."""
    rows = w.shape[0]
    return (
        w.reshape(num_heads, 2, rows // num_heads // 2, *w.shape[1:])
        .transpose(1, 2)
        .reshape(w.shape)
    )


def unpermute(w: torch.Tensor, num_heads: int) -> torch.Tensor:
    """The inverse of `permute`: back to Hugging Face's row order."""
    rows = w.shape[0]
    return (
        w.reshape(num_heads, rows // num_heads // 2, 2, *w.shape[1:])
        .transpose(1, 2)
        .reshape(w.shape)
    )


# --8<-- [end:permute]


# --8<-- [start:export]
def export(path: str | Path, model_dir: str | Path = TARGET_DIR) -> None:
    """Write the model in `model_dir` (weights, config, tokenizer) to the GGUF file `path`."""
    import gguf  # the `serving` extra

    model, tokenizer = load(model_dir, "cpu")
    c = model.config
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_name(f"llmserve-ref {Path(model_dir).name}")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_context_length(c.max_position_embeddings)
    writer.add_embedding_length(c.hidden_size)
    writer.add_block_count(c.num_hidden_layers)
    writer.add_feed_forward_length(c.intermediate_size)
    writer.add_head_count(c.num_attention_heads)
    writer.add_head_count_kv(c.num_key_value_heads)
    writer.add_rope_dimension_count(c.head_dim)
    writer.add_rope_freq_base(c.rope_theta)
    writer.add_layer_norm_rms_eps(c.rms_norm_eps)
    writer.add_vocab_size(c.vocab_size)

    # The tokenizer, as llama.cpp's "gpt2" (byte-level BPE) model reads it.
    spec = json.loads((Path(model_dir) / "tokenizer.json").read_text())
    special = tokenizer.backend.get_added_tokens_decoder()
    vocab = sorted(spec["model"]["vocab"].items(), key=lambda item: item[1])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")  # GPT-2's pre-tokenizer regex, as ByteLevel uses
    writer.add_token_list([token for token, _ in vocab])
    writer.add_token_types(
        [gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL for _, i in vocab]
    )
    writer.add_token_merges([" ".join(pair) for pair in spec["model"]["merges"]])
    writer.add_bos_token_id(tokenizer.bos_id)
    writer.add_eos_token_id(tokenizer.eos_id)
    writer.add_pad_token_id(tokenizer.eos_id)
    # Every prompt starts with exactly one <|bos|>, as on our server and vLLM. llama.cpp
    # puts BOS in front of a raw prompt when add_bos_token is set (llama-vocab.cpp), and
    # before tokenizing a chat it strips the <|bos|> our template writes (common/chat.cpp),
    # so a chat starts with one too. With False, a raw prompt would reach the model without
    # BOS.
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)  # the model ends its turn with <|eos|> itself
    writer.add_chat_template(CHAT_TEMPLATE)

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, c.num_hidden_layers)
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight" and c.tie_word_embeddings:
            continue  # llama.cpp reuses token_embd when output.weight is absent
        if name.endswith("q_proj.weight"):
            tensor = permute(tensor, c.num_attention_heads)
        elif name.endswith("k_proj.weight"):
            tensor = permute(tensor, c.num_key_value_heads)
        gguf_name = names.get_name(name, try_suffixes=(".weight",))
        if gguf_name is None:
            raise ValueError(f"llama.cpp's tensor map has no name for {name!r}")
        writer.add_tensor(gguf_name, tensor.to(torch.float32).contiguous().numpy())

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


# --8<-- [end:export]


# The chat template in the Go template syntax Ollama uses: the same text as `render` writes,
# system and developer messages in front of the next user message. A Go template cannot
# refuse a conversation, so a role it cannot place is left out.
OLLAMA_TEMPLATE = (
    '<|bos|>{{- $system := "" }}{{- range .Messages }}'
    '{{- if or (eq .Role "system") (eq .Role "developer") }}'
    '{{- $system = printf "%s%s\\n\\n" $system .Content }}'
    '{{- else if eq .Role "user" }}<|user|>{{ $system }}{{ .Content }}{{- $system = "" }}'
    '{{- else if eq .Role "assistant" }}<|assistant|>{{ .Content }}<|eos|>'
    "{{- end }}{{- end }}<|assistant|>"
)


def modelfile(gguf_path: str | Path, context_length: int = 256) -> str:
    """An Ollama Modelfile for the exported file: template, stop tokens, context length."""
    return (
        f"FROM ./{Path(gguf_path).name}\n"
        f'TEMPLATE """{OLLAMA_TEMPLATE}"""\n'
        f'PARAMETER stop "{EOS}"\n'
        f'PARAMETER stop "{USER}"\n'
        f"PARAMETER num_ctx {context_length}\n"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Export the tiny target model to GGUF.")
    parser.add_argument("out", type=Path, help="the .gguf file to write")
    args = parser.parse_args(argv)
    export(args.out)
    (args.out.parent / "Modelfile").write_text(modelfile(args.out))
    print(f"wrote {args.out} and {args.out.parent / 'Modelfile'}")


if __name__ == "__main__":
    main()
