"""numabench.machine.gpus: bus id normalisation and CUDA_VISIBLE_DEVICES applied to NVML's order."""
from __future__ import annotations

import pytest

from numabench.machine.gpus import _visible_from_nvml, normalize_bus_id


@pytest.mark.parametrize("raw, expected", [
    pytest.param("00000000:06:00.0", "0000:06:00.0", id="nvml-8-digit-domain"),
    pytest.param("0000:06:00.0", "0000:06:00.0", id="cuda-form"),
    pytest.param("00000000:AB:00.0", "0000:ab:00.0", id="upper-case"),
    pytest.param("  0000:18:00.0\n", "0000:18:00.0", id="whitespace"),
    pytest.param("00000001:9A:00.0", "0001:9a:00.0", id="domain-1"),
])
def test_normalize_bus_id(raw, expected):
    assert normalize_bus_id(raw) == expected


@pytest.mark.parametrize("raw", [
    pytest.param("", id="empty"),
    pytest.param("garbage", id="no-colon"),
    pytest.param("zz:06:00.0", id="domain-not-hex"),
])
def test_normalize_bus_id_rejects(raw):
    with pytest.raises(ValueError):
        normalize_bus_id(raw)


def test_normalize_bus_id_without_domain():
    try:
        got = normalize_bus_id("06:00.0")
    except ValueError:
        return
    assert got == "0000:06:00.0"


# NVML keys are sysfs bus ids; sorted() gives PCI order, which is CUDA's with CUDA_DEVICE_ORDER=PCI_BUS_ID.
NVML = {
    "0000:9a:00.0": ("NVIDIA H100 80GB HBM3", 85520809984, "GPU-ef01aaaa-1111-2222-3333-444455556666"),
    "0000:18:00.0": ("NVIDIA H100 80GB HBM3", 85520809984, "GPU-abcd1234-1111-2222-3333-444455556666"),
    "0000:5d:00.0": ("NVIDIA H100 80GB HBM3", 85520809984, "GPU-abce9999-1111-2222-3333-444455556666"),
}
A, B, C = "0000:18:00.0", "0000:5d:00.0", "0000:9a:00.0"  # PCI order


@pytest.mark.parametrize("visible, expected", [
    pytest.param(None, [A, B, C], id="unset-all-in-pci-order"),
    pytest.param("0,1,2", [A, B, C], id="all-explicit"),
    pytest.param("1,0", [B, A], id="reordered"),
    pytest.param(" 2 , 0 ", [C, A], id="spaces"),
    pytest.param("3", [], id="index-beyond-count"),
    pytest.param("0,3,1", [A], id="beyond-count-stops-list"),
    pytest.param("GPU-abcd", [A], id="uuid-prefix"),
    pytest.param("GPU-ef01aaaa-1111-2222-3333-444455556666", [C], id="full-uuid"),
    pytest.param("GPU-abcd,1", [A, B], id="uuid-then-index"),
    pytest.param("GPU-abc", [], id="ambiguous-uuid-prefix-stops"),
    pytest.param("GPU-ffff", [], id="unknown-uuid"),
    pytest.param("", [], id="empty-means-none"),
    pytest.param("1,x,0", [B], id="invalid-entry-stops-list"),
    pytest.param("0,-1,1", [A], id="negative-stops-list"),
    pytest.param("1,,0", [B], id="empty-entry-stops-list"),
])
def test_visible_from_nvml(visible, expected):
    assert _visible_from_nvml(NVML, visible) == expected


def test_visible_from_nvml_no_gpus():
    assert _visible_from_nvml({}, None) == []
    assert _visible_from_nvml({}, "0") == []
