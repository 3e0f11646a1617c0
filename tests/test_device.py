"""`LLMSERVE_DEVICE` picks the device; unset, the best one present; never a silent fallback.

Which devices are present is torch's to say (`torch.cuda.is_available`,
`torch.backends.mps.is_available`), so the tests set both to what each case needs and
check every combination, on any machine.
"""

from __future__ import annotations

import itertools
import os

import pytest
import torch

from llmserve_ref.device import DEVICES, available, best_device, get_device


@pytest.fixture
def machine(monkeypatch):
    """`machine(cuda=..., mps=...)`: make torch report those devices present or not."""

    def have(cuda: bool, mps: bool) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)

    return have


@pytest.mark.parametrize(("cuda", "mps"), list(itertools.product([False, True], repeat=2)))
def test_unset_picks_cuda_then_mps_then_cpu(machine, monkeypatch, cuda, mps):
    machine(cuda=cuda, mps=mps)
    monkeypatch.delenv("LLMSERVE_DEVICE", raising=False)
    expected = "cuda" if cuda else "mps" if mps else "cpu"
    assert best_device() == expected
    assert get_device() == torch.device(expected)
    assert [d for d in DEVICES if available(d)] == ["cpu", *(["mps"] if mps else []),
                                                    *(["cuda"] if cuda else [])]  # fmt: skip


@pytest.mark.parametrize("value", ["", "  "])
def test_empty_counts_as_unset(machine, monkeypatch, value):
    machine(cuda=False, mps=True)
    monkeypatch.setenv("LLMSERVE_DEVICE", value)
    assert get_device() == torch.device("mps")


@pytest.mark.parametrize(
    ("value", "expected"), [("cpu", "cpu"), (" CUDA ", "cuda"), ("Mps", "mps")]
)
def test_a_present_device_is_taken_whatever_its_case(machine, monkeypatch, value, expected):
    machine(cuda=True, mps=True)
    monkeypatch.setenv("LLMSERVE_DEVICE", value)
    assert get_device() == torch.device(expected)


def test_the_cpu_is_taken_when_asked_even_beside_a_gpu(machine, monkeypatch):
    machine(cuda=True, mps=False)
    monkeypatch.setenv("LLMSERVE_DEVICE", "cpu")
    assert get_device() == torch.device("cpu")


@pytest.mark.parametrize("name", ["cuda", "mps"])
def test_a_missing_device_is_an_error_that_names_what_to_do(machine, monkeypatch, name):
    machine(cuda=False, mps=False)
    monkeypatch.setenv("LLMSERVE_DEVICE", name)
    message = rf"LLMSERVE_DEVICE='{name}' but this machine has no {name} device; .* 'cpu'"
    with pytest.raises(RuntimeError, match=message):
        get_device()


def test_an_unknown_name_is_an_error_that_lists_the_devices(monkeypatch):
    monkeypatch.setenv("LLMSERVE_DEVICE", "tpu")
    with pytest.raises(ValueError, match=r"LLMSERVE_DEVICE='tpu' .* one of cpu, mps, cuda"):
        get_device()
    with pytest.raises(ValueError, match=r"unknown device 'gpu'; choose one of cpu, mps, cuda"):
        available("gpu")


def test_the_test_session_runs_on_the_device_it_names():
    """What the nox sessions rely on: the device this suite runs on is the one named, and a
    tensor made on it lives there."""
    name = os.environ.get("LLMSERVE_DEVICE", "").strip().lower()
    chosen = get_device()
    if name:
        assert chosen == torch.device(name)
    assert torch.zeros(1, device=chosen).device.type == chosen.type
