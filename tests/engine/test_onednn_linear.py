"""Linear layers through oneDNN: the products of `F.linear` (MKL), on either side of the
row threshold, eagerly and inside a compiled graph; the engine's model packed where oneDNN
is the faster library (AVX-512, read from /proc/cpuinfo as the oracle), the model not.

The oracle is `torch.nn.functional.linear` on the same weight: another library sums in
another order, so products agree to float32 rounding, not bit for bit (greedy tokens are
checked against `generate` in test_engine_core.py, through the runner that packs).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from llmserve_ref.engine import onednn_linear as module
from llmserve_ref.engine.model_runner import ModelRunner
from llmserve_ref.engine.onednn_linear import (
    ONEDNN_MIN_ROWS,
    OneDNNLinear,
    onednn_available,
    onednn_faster,
    onednn_linear,
    pack_linear_layers,
)
from llmserve_ref.engine.paged_batch import Chunk
from llmserve_ref.model.llama import Llama
from llmserve_ref.model.llama_config import ModelConfig

pytestmark = pytest.mark.skipif(
    not onednn_available(torch.zeros(1)),
    reason="the engine runs oneDNN's products on x86-64 CPUs, in a torch built with it",
)
# torch's AVX-512 kernels need these four (aten/src/ATen/cpu/vec/vec512); the engine's choice
# of library follows them.
AVX512 = {"avx512f", "avx512bw", "avx512vl", "avx512dq"}


@pytest.fixture
def faster(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a CPU with AVX-512, where the engine packs its layers."""
    monkeypatch.setattr(module, "onednn_faster", lambda: True)


def test_onednn_is_the_engines_library_on_a_cpu_with_avx512_and_not_with_avx2() -> None:
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists():
        pytest.skip("needs Linux's /proc/cpuinfo for the CPU's flags")
    flags = set(re.search(r"^flags\s*:(.*)$", cpuinfo.read_text(), re.M)[1].split())
    assert onednn_faster() == AVX512.issubset(flags), sorted(flags & (AVX512 | {"avx2"}))


def layer(seed: int = 0, bias: bool = False) -> nn.Linear:
    torch.manual_seed(seed)
    return nn.Linear(256, 688, bias=bias)  # the tiny model's gate projection's shape


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rows", [1, ONEDNN_MIN_ROWS - 1, ONEDNN_MIN_ROWS, 64, 300])
def test_the_product_is_f_linear_s(rows: int, bias: bool) -> None:
    linear = layer(bias=bias)
    x = torch.randn(1, rows, 256, generator=torch.Generator().manual_seed(rows))
    packed = OneDNNLinear(linear)
    with torch.inference_mode():
        torch.testing.assert_close(packed(x), linear(x), atol=2e-5, rtol=1e-5)


def test_below_the_threshold_it_is_f_linear_itself_and_above_it_is_not() -> None:
    linear = layer()
    packed = OneDNNLinear(linear)
    few = torch.randn(ONEDNN_MIN_ROWS - 1, 256)
    many = torch.randn(ONEDNN_MIN_ROWS, 256)
    with torch.inference_mode(), torch.profiler.profile() as prof:
        assert torch.equal(packed(few), F.linear(few, linear.weight))  # bit for bit: MKL
        packed(many)
    ops = [e.name for e in prof.events()]
    assert ops.count("mkldnn::_linear_pointwise") == 1  # only the call with enough rows


def test_the_custom_op_a_compiled_graph_calls_passes_torch_s_checks() -> None:
    packed = OneDNNLinear(layer())
    x = torch.randn(32, 256)
    weight = packed.weight.detach()  # inference: no gradient
    torch.library.opcheck(onednn_linear, (x, weight, None, packed.key))
    torch.library.opcheck(onednn_linear, (x, weight, torch.randn(688), packed.key))


@pytest.mark.slow  # compiles a small graph (seconds, cold)
def test_in_a_compiled_graph_the_product_is_the_same() -> None:
    linear = layer()
    packed = OneDNNLinear(linear)
    x = torch.randn(1, 64, 256)
    compiled = torch.compile(lambda x: F.silu(packed(x)), dynamic=False, fullgraph=True)
    with torch.inference_mode():
        torch.testing.assert_close(
            compiled(x), F.silu(F.linear(x, linear.weight)), atol=2e-5, rtol=1e-5
        )


def tiny_model(dtype: torch.dtype = torch.float32) -> Llama:
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=64, hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    )  # fmt: skip
    return Llama(config).to(dtype).eval()


def test_packing_replaces_each_linear_layer_by_one_that_shares_its_weights(faster: None) -> None:
    model = tiny_model()
    linears = {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    tokens = torch.randint(0, 64, (1, 40), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        expected = model(tokens)
    assert pack_linear_layers(model) is model  # in place
    onednn = {name: m for name, m in model.named_modules() if isinstance(m, OneDNNLinear)}
    assert onednn.keys() == linears.keys() and len(onednn) == 2 * 7 + 1  # 7 a layer; head
    assert not any(isinstance(m, nn.Linear) for m in model.modules())
    assert all(onednn[name].weight is layer.weight for name, layer in linears.items())
    with torch.inference_mode():
        torch.testing.assert_close(model(tokens), expected, atol=1e-4, rtol=1e-4)


def test_a_model_whose_weights_onednn_does_not_take_is_left_as_it_is(faster: None) -> None:
    model = tiny_model(torch.bfloat16)
    assert pack_linear_layers(model) is model
    assert not any(isinstance(m, OneDNNLinear) for m in model.modules())


def test_where_onednn_is_slower_the_model_keeps_its_layers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(module, "onednn_faster", lambda: False)  # as with AVX2 only
    model = tiny_model()
    assert pack_linear_layers(model) is model
    assert not any(isinstance(m, OneDNNLinear) for m in model.modules())


def test_the_model_runner_runs_its_linear_layers_through_onednn(faster: None) -> None:
    model = tiny_model()
    runner = ModelRunner(model, num_blocks=8, block_size=4)
    assert runner.model is not model
    assert any(isinstance(m, OneDNNLinear) for m in runner.model.modules())
    assert not any(isinstance(m, OneDNNLinear) for m in model.modules())  # the model's own
    # A prompt of 20 tokens: its products have 20 rows, oneDNN's; the logits are MKL's.
    prompt = [Chunk(list(range(1, 21)), start=0, block_table=[0, 1, 2, 3, 4], samples=True)]
    unpacked = ModelRunner(model, num_blocks=8, block_size=4)
    unpacked.model = model  # the same weights, every product through F.linear
    found, expected = runner.forward(prompt), unpacked.forward(prompt)
    torch.testing.assert_close(found, expected, atol=1e-4, rtol=1e-4)
