"""The device catalogue (config/devices.yaml): plausible units, a source for every number,
a note for every null, matching of the names CUDA and /proc/cpuinfo give, and refusals of a
malformed file naming the key."""

from __future__ import annotations

import re

import pytest
import yaml

from ssmbench import catalogue
from ssmbench.catalogue import DEVICES_YAML, CatalogueError

DEVICES = catalogue.load()


def test_every_device_the_issue_names_is_there():
    wanted = {
        "H200 SXM", "H100 SXM", "H100 PCIe", "A100 SXM 40GB", "A100 SXM 80GB", "L40S", "L4",
        "T4", "B200", "RTX 4090", "RTX 4050 Laptop", "Jetson AGX Orin 64GB",
        "x86 server core", "AMD EPYC VM",
    }  # fmt: skip
    assert wanted <= set(DEVICES)
    assert {d.kind for d in DEVICES.values()} == {"gpu", "cpu"}


@pytest.mark.parametrize("name", sorted(DEVICES))
def test_units_are_plausible(name):
    d = DEVICES[name]
    assert set(d.peak_TFLOPs) == {"bf16", "fp16", "fp32", "tf32"}
    if d.kind == "gpu":
        # GB/s, not TB/s nor B/s: an LPDDR module (tens) to eight HBM stacks (thousands)
        assert d.bandwidth_GBps is None or 50 <= d.bandwidth_GBps <= 20000
        # TFLOP/s, not FLOP/s: a T4's 8 to a B200's low-precision thousands
        assert all(p is None or 1 <= p <= 10000 for p in d.peak_TFLOPs.values())
        assert d.memory_GB is None or 4 <= d.memory_GB <= 512
        assert d.l2_MB is None or 1 <= d.l2_MB <= 256
        assert d.tdp_W is None or 10 <= d.tdp_W <= 2000
    else:  # a CPU class: peaks are a run's measured ceilings, never the catalogue's
        assert d.peak_TFLOPs["tf32"] is None
    fp32, bf16, fp16 = (d.peak_TFLOPs[k] for k in ("fp32", "bf16", "fp16"))
    for low in (bf16, fp16):
        if low is not None and fp32 is not None:
            assert low >= fp32  # tensor cores outrun the CUDA cores' fp32


@pytest.mark.parametrize("name", sorted(DEVICES))
def test_every_number_has_a_source_and_every_null_a_note(name):
    d = DEVICES[name]
    numbers = {
        "peak_TFLOPs": any(p is not None for p in d.peak_TFLOPs.values()),
        **{f: getattr(d, f) is not None for f in ("bandwidth_GBps", "memory_GB", "l2_MB", "tdp_W")},
    }
    for field, held in numbers.items():
        if held:
            assert re.search(r"\(.+\), https://\S+$", d.sources[field]), (field, d.sources)
    for dtype, peak in d.peak_TFLOPs.items():
        if peak is None:
            assert d.notes[f"peak_TFLOPs.{dtype}"].strip()
    for field in ("bandwidth_GBps", "memory_GB", "l2_MB", "tdp_W"):
        if getattr(d, field) is None:
            assert d.notes[field].strip()


def test_halved_sparse_figures_say_so():
    """Where a datasheet prints only the with-sparsity peak, the stored value is half of it
    and the source says so (H100 SXM: 1,979 TFLOPS bf16 with sparsity)."""
    h100 = DEVICES["H100 SXM"]
    assert h100.peak_TFLOPs["bf16"] == 1979 / 2 + 0.0  # 989.5
    assert "half the with-sparsity" in h100.sources["peak_TFLOPs"]
    assert "1,979" in h100.sources["peak_TFLOPs"]


@pytest.mark.parametrize(
    "name, key",
    [
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100 SXM 40GB"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
        ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L4", "L4"),
        ("Tesla T4", "T4"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("NVIDIA GeForce RTX 4050 Laptop GPU", "RTX 4050 Laptop"),
        ("NVIDIA Jetson Orin Nano (8 GB)", "Jetson Orin Nano 8GB"),  # the importer's name
        ("AMD EPYC", "AMD EPYC VM"),  # this CI machine's /proc/cpuinfo
        ("Intel(R) Xeon(R) Platinum 8480+", "x86 server core"),
        ("AMD EPYC 9654 96-Core Processor", "x86 server core"),
    ],
)
def test_match_real_device_names(name, key):
    assert catalogue.match(name).name == key


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA GH200 480GB",  # Grace Hopper: not an H200
        "NVIDIA H100 NVL",  # other peaks than H100 PCIe/SXM
        "NVIDIA H200 NVL",
        "NVIDIA GB200",
        "NVIDIA A10",
        "NVIDIA L40",  # neither L40S nor L4
        "NVIDIA GeForce RTX 4090 D",
        "NVIDIA GeForce RTX 4090 Laptop GPU",
        "Orin",  # what CUDA calls every Jetson Orin: AGX 64 GB and Nano 8 GB alike
        "",
    ],
)
def test_match_refuses_look_alikes(name):
    assert catalogue.match(name) is None


def test_match_by_kind():
    assert catalogue.match("AMD EPYC", kind="gpu") is None
    assert catalogue.match("NVIDIA H200", kind="cpu") is None
    assert catalogue.match("NVIDIA H200", kind="gpu").name == "H200 SXM"
    with pytest.raises(ValueError, match="unknown device kind 'tpu'"):
        catalogue.match("NVIDIA H200", kind="tpu")


def test_device_names_the_known_ones():
    assert catalogue.device("T4").peak_TFLOPs["bf16"] is None  # Turing: no bf16 tensor cores
    with pytest.raises(KeyError, match=r"no device 'H300'.*known: \[.*'H200 SXM'"):
        catalogue.device("H300")


def _write(tmp_path, edit) -> str:
    data = yaml.safe_load(DEVICES_YAML.read_text())
    edit(data)
    path = tmp_path / "devices.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _set(keys, value):
    def edit(data):
        node = data
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value

    return edit


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            _set(["devices", "L4", "bandwidth_GBps"], -300.0),
            r"key devices\.L4\.bandwidth_GBps: .*",
        ),
        (
            _set(["devices", "L4", "peak_TFLOPs", "int8"], 242.0),
            r"key devices\.L4\.peak_TFLOPs: .*'int8' was unexpected",
        ),
        (
            _set(["devices", "L4", "notes"], {}),
            r"key devices\.L4\.l2_MB: null without a note",
        ),
        (
            _set(["devices", "L4", "source", "doc"], "l4_brochure"),
            r"key devices\.L4\.source\.doc: 'l4_brochure' is not in documents",
        ),
        (
            _set(["devices", "T4", "source"], None),
            r"key devices\.T4\.source: None is not of type 'object'",
        ),
        (
            _set(["devices", "L4", "match"], ["(unclosed"]),
            r"key devices\.L4\.match\[0\]: bad pattern",
        ),
        (
            _set(["documents", "l4_datasheet", "url"], "http://example.com/l4"),
            r"key documents\.l4_datasheet\.url: .* does not match",
        ),
    ],
)
def test_a_malformed_catalogue_is_refused_naming_the_key(tmp_path, edit, message):
    with pytest.raises(CatalogueError, match=message):
        catalogue.load(_write(tmp_path, edit))


def test_a_number_without_a_source_is_refused(tmp_path):
    def edit(data):
        l4 = data["devices"]["L4"]
        del l4["source"], l4["sources"]

    with pytest.raises(CatalogueError, match=r"devices\.L4\.peak_TFLOPs: a number without"):
        catalogue.load(_write(tmp_path, edit))


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(CatalogueError, match=r"nothing\.yaml: No such file"):
        catalogue.load(tmp_path / "nothing.yaml")
