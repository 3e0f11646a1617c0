"""The project's two tiny trained models, ready to use: a target and its draft.

Both were trained by ``python -m llmserve_ref.model.train`` on the project's own
generated stories (see `llmserve_ref.model.corpus`) and share one tokenizer. The
target (~3M parameters) is the model the pages sample from; the draft (~0.5M)
is the cheap guesser that speculative decoding pairs with it.

>>> model, tokenizer = load_target("cpu")
>>> model.config.num_attention_heads, model.config.num_key_value_heads
(8, 2)
>>> tokenizer.decode(tokenizer.encode("Once upon a time, there was a fox."))
'Once upon a time, there was a fox.'
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from llmserve_ref.model.tokenizer import Tokenizer

if TYPE_CHECKING:
    import torch

    from llmserve_ref.model.llama import Llama

MODELS_DIR = Path(__file__).resolve().parent.parent / "data" / "models"
TARGET_DIR = MODELS_DIR / "target"
DRAFT_DIR = MODELS_DIR / "draft"
# The models a server can serve, by the name clients put in `"model"`.
MODEL_DIRS: dict[str, Path] = {"tiny": TARGET_DIR, "tiny-draft": DRAFT_DIR}


def load(
    directory: str | Path, device: torch.device | str | None = None
) -> tuple[Llama, Tokenizer]:
    """The model and tokenizer in `directory`, the model on `device` (default: `get_device()`).

    torch is imported here, when a model is loaded: where the models live, and their
    tokenizer, are all that a client of a server (the benchmark client) needs."""
    from llmserve_ref.model.llama import Llama

    return Llama.from_pretrained(directory, device), Tokenizer.from_file(directory)


def load_target(device: torch.device | str | None = None) -> tuple[Llama, Tokenizer]:
    """The target model (~3M parameters) and its tokenizer."""
    return load(TARGET_DIR, device)


def load_draft(device: torch.device | str | None = None) -> tuple[Llama, Tokenizer]:
    """The draft model (~0.5M parameters) and its tokenizer, the same as the target's."""
    return load(DRAFT_DIR, device)
