"""The accelerator catalog against the datasheets' printed figures, typed in here independently."""

from __future__ import annotations

import pytest

from llmserve_ref.planning.hardware import ACCELERATORS, GB, GPUS, TERA, dense, gpu

APPLE = ("M2-", "M3-", "M4-")

# (bf16 TFLOP/s as the datasheet prints it, whether that figure is "with sparsity",
#  fp8 likewise or None, bandwidth in GB/s)
DATASHEET = {
    "L4": (242, True, 485, 300),
    "A100-SXM-40GB": (312, False, None, 1555),
    "A100-SXM-80GB": (312, False, None, 2039),
    "H100-SXM": (1979, True, 3958, 3350),
    "H100-PCIe": (1513, True, 3026, 2000),
    "H200-SXM": (1979, True, 3958, 4800),
    "L40S": (362.05, False, 733, 864),
    "B200": (4500, True, 9000, 7700),
    "MI300X": (1307.4, False, 2614.9, 5300),
}


def test_every_gpu_of_the_kv_calculator_is_in_the_full_catalog():
    assert ACCELERATORS[: len(GPUS)] == GPUS
    assert len({g.name.lower() for g in ACCELERATORS}) == len(ACCELERATORS)
    assert {g.name for g in ACCELERATORS} >= set(DATASHEET) | {"M2-Max", "M3-Max", "M4-Max"}


@pytest.mark.parametrize("name", DATASHEET)
def test_dense_peaks_and_bandwidth_match_the_datasheet(name):
    bf16, sparse, fp8, bandwidth = DATASHEET[name]
    g = gpu(name)
    factor = 2 if sparse else 1
    assert g.bf16_flops == pytest.approx(bf16 * TERA / factor)
    assert g.memory_bandwidth == pytest.approx(bandwidth * GB)
    if fp8 is None:
        assert g.fp8_flops is None
    else:
        assert g.fp8_flops == pytest.approx(fp8 * TERA / factor)
    if sparse:  # the stored dense peak is below the printed sparse one
        assert g.bf16_flops < bf16 * TERA


def test_published_dense_figures():
    h100 = gpu("H100-SXM")
    assert round(h100.bf16_flops / TERA) == 990  # 989.4 in NVIDIA's whitepaper
    assert round(h100.fp8_flops / TERA) == 1979
    assert gpu("H200-SXM").bf16_flops == h100.bf16_flops  # same chip, faster memory
    assert dense(624) == 312 * TERA  # A100: the datasheet prints 312 dense, 624 sparse


def test_fp8_is_twice_bf16_where_present_and_absent_on_a100_and_apple():
    for g in ACCELERATORS:
        if g.fp8_flops is None:
            assert g.name.startswith(("A100", *APPLE))
            assert g.peak_flops("fp8") == g.bf16_flops  # falls back to bf16 matmuls
        else:
            assert g.fp8_flops / g.bf16_flops == pytest.approx(2, rel=0.03)


def test_ridge_points():
    assert gpu("H100-SXM").ridge_point() == pytest.approx(989.5e12 / 3.35e12)
    assert round(gpu("H100-SXM").ridge_point()) == 295
    assert gpu("H200-SXM").ridge_point() < gpu("H100-SXM").ridge_point()
    for g in ACCELERATORS:  # every chip needs tens to hundreds of FLOPs per byte
        assert 20 < g.ridge_point() < 500


def test_links_nvlink_beats_pcie():
    nvlink = gpu("H100-SXM").interconnect_bandwidth
    pcie = gpu("H100-PCIe").interconnect_bandwidth
    assert (nvlink, pcie) == (900 * GB, 128 * GB)
    assert all(g.interconnect_bandwidth is None for g in ACCELERATORS if g.name.startswith(APPLE))
    assert all(g.source.startswith("https://") for g in ACCELERATORS)


def test_unknown_gpu_lists_the_catalog():
    with pytest.raises(ValueError, match=r"unknown GPU 'H300'; choose one of L4, .*M4-Max"):
        gpu("H300")
    with pytest.raises(ValueError, match="no FLOP/s"):
        type(gpu("L4"))("x", 1, "https://x").peak_flops()
