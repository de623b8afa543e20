"""Whole-model cells (ssmbench.lm.cell), their record, table and command line: ci-size
models, fp32 CPU, small budgets.  The measured cells run in one fresh hf-eager process
(the kernel packages blocked before transformers is imported, as the command line does);
the paths that stop before any model is built run here."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ssmbench import paths
from ssmbench.lm import cell as lm_cell
from ssmbench.lm.cell import LMCellSpec, run_lm_cell
from ssmbench.lm.record import LMRecord, read_lm_record, write_lm_record
from ssmbench.lm.table import lm_table, read_lm_table, write_lm_tables
from ssmbench.matrix import Timing
from ssmbench.paths import REPO

TIMING = {"warmup": 1, "min_samples": 3, "max_samples": 6, "min_time_s": 0.0, "max_time_s": 2.0}
TIMING["timeout_s"] = 90
MODELS = {"ssm": "mamba2-130m", "transformer": "qwen2.5-0.5b", "hybrid": "falcon-h1-0.5b"}
T, N = 48, 4  # a prompt that is not a chunk multiple (16); N - 1 = 3 timed steps a round


def spec(**kw) -> dict:
    base = dict(model="mamba2-130m", backend="hf-eager", phase="prefill", batch=1, seq_len=T)
    base.update(new_tokens=1, dtype="fp32", device="cpu", preset="ci", timing=TIMING)
    base.update(energy_window_s=0.0)  # no RAPL here; where there is, keep the tests short
    return {**base, **kw}


def cell_id(s: dict) -> str:
    return f"{s['model']}-{s['phase']}-b{s['batch']}"


SPECS = [
    spec(model=model, **({"phase": "decode", "new_tokens": N, "batch": 2} if decode else {}))
    for model in MODELS.values()
    for decode in (False, True)
]
CHILD = """
import json, sys
from ssmbench.lm import backends
backends.prepare("hf-eager")  # first thing, as `python -m ssmbench lm-cell` does
from ssmbench.lm.cell import LMCellSpec, profile_lm_cell, run_lm_cells
specs = json.loads(sys.argv[1])
records = run_lm_cells(specs, threads=1)
profile = profile_lm_cell(LMCellSpec.from_dict(specs[0]), threads=1)
print(json.dumps({"records": records, "profile": profile}))
"""


def _env() -> dict:
    src = str(REPO / "src")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, str(REPO)) if p)}


@pytest.fixture(scope="module")
def measured():
    """The six cells of SPECS and one operator profile, in one hf-eager process (~30 s)."""
    out = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(SPECS)],
        capture_output=True,
        text=True,
        timeout=600,
        env=_env(),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return {cell_id(r): r for r in result["records"]}, result["profile"]


@pytest.mark.slow
@pytest.mark.parametrize("s", SPECS, ids=cell_id)
def test_a_cell_is_measured_after_its_gate(measured, s):
    r = measured[0][cell_id(s)]
    assert r["status"] == "ok", r["reason"]
    assert r["verify"]["passed"] and r["verify"]["source"] == "run by the cell"
    assert r["isolation"].startswith("kernel packages blocked: mamba_ssm")
    assert r["layer_impls"] and not any(layer["kernels"] for layer in r["layers"])
    assert r["n_samples"] == len(r["samples_ms"]) >= TIMING["min_samples"]
    assert min(r["samples_ms"]) > 0
    # the summaries against the raw samples, recomputed here with NumPy
    median = float(np.median(r["samples_ms"]))
    p95 = float(np.percentile(r["samples_ms"], 95))
    if s["phase"] == "prefill":  # a sample is one prefill call of batch x T tokens
        assert (r["ttft_ms_median"], r["ttft_ms_p95"]) == pytest.approx((median, p95))
        assert r["tpot_ms_median"] is None
        assert r["tokens_per_s"] == pytest.approx(s["batch"] * T * 1e3 / median)
    else:  # a sample is one decode step of batch tokens, N - 1 of them a round
        assert (r["tpot_ms_median"], r["tpot_ms_p95"]) == pytest.approx((median, p95))
        assert r["n_samples"] % (N - 1) == 0
        assert r["tokens_per_s"] == pytest.approx(s["batch"] * 1e3 / median)
        # the end-to-end check: its rounds' median against the loop's, within a tolerance
        # no tighter than the floor
        e2e = r["e2e_samples_ms"]
        assert len(e2e) == lm_cell.E2E_ROUNDS and r["e2e_tolerance"] >= lm_cell.E2E_TOLERANCE
        rel_diff = (float(np.median(e2e)) - median) / median
        assert r["e2e_rel_diff"] == pytest.approx(rel_diff)
        iqr = np.subtract(*np.percentile(e2e, [75, 25])) / np.median(e2e)
        if min(e2e) <= 0 or iqr > 1:  # generate(1)'s noise swamps the N - 1 steps
            assert r["e2e_agrees"] is None
            assert any(note.startswith("end-to-end check inconclusive") for note in r["notes"])
        elif abs(rel_diff) <= lm_cell.E2E_TOLERANCE:
            assert r["e2e_agrees"] is True
        elif r["e2e_agrees"] is False:
            assert any(note.startswith("end-to-end TPOT") for note in r["notes"])


@pytest.mark.slow
@pytest.mark.parametrize("s", SPECS, ids=cell_id)
def test_the_memory_split_adds_up_and_the_cache_is_the_formula(measured, s):
    r = measured[0][cell_id(s)]
    assert r["weights_bytes"] + r["cache_bytes"] + r["activations_bytes"] == r["peak_bytes"]
    assert r["activations_bytes"] > 0
    assert r["weights_bytes"] >= 4 * r["n_params"]  # fp32 parameters, plus the buffers
    assert r["cache_formula_ok"] and r["cache_bytes"] == r["cache_formula_bytes"]
    kinds = (r["cache_kv_bytes"] > 0, r["cache_ssm_bytes"] > 0, r["cache_conv_bytes"] > 0)
    assert (
        kinds
        == {
            "transformer": (True, False, False),
            "ssm": (False, True, True),
            "hybrid": (True, True, True),
        }[r["family"]]
    )


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS.values())
def test_the_cache_after_the_prefill_is_linear_in_batch(measured, model):
    """The decode cells (batch 2) keep twice the prefill cells' (batch 1) cache, kind by
    kind, at the same T: the cache is read after the prefill, not after the steps."""
    one, two = (measured[0][f"{model}-{phase}"] for phase in ("prefill-b1", "decode-b2"))
    for kind in ("kv", "conv", "ssm"):
        assert two[f"cache_{kind}_bytes"] == 2 * one[f"cache_{kind}_bytes"]


@pytest.mark.slow
def test_energy_without_a_source_says_why(measured):
    r = measured[0]["mamba2-130m-prefill-b1"]
    if r["energy_j"] is None:
        assert r["energy_method"] == "none" and r["energy_reason"]
    else:
        assert r["energy_j_per_token"] == pytest.approx(r["energy_j"] / T)


@pytest.mark.slow
def test_the_operator_profile_is_bucketed_cpu_self_time(measured):
    from ssmbench.measure.profile import BUCKETS

    rows = measured[1]
    assert rows and {row["bucket"] for row in rows} <= set(BUCKETS)
    assert all(row["model"] == "mamba2-130m" and row["phase"] == "prefill" for row in rows)


@pytest.mark.slow
def test_the_records_round_trip_and_make_the_lm_table(measured, tmp_path):
    records = []
    for name, data in measured[0].items():
        path = tmp_path / f"{name}.json"
        write_lm_record(path, LMRecord.from_dict(data))
        records.append(read_lm_record(path))
        assert records[-1].to_dict() == data
    records.append(_unavailable_record())
    table = lm_table(records)
    assert len(table) == 7 and set(table.status) == {"ok", "unavailable"}
    write_lm_tables(table, tmp_path / "lm.csv", tmp_path / "lm.parquet")
    for name in ("lm.csv", "lm.parquet"):
        back = read_lm_table(tmp_path / name)
        assert back.tpot_ms_median.notna().sum() == 3 and back.ttft_ms_median.notna().sum() == 3
        assert list(back.layer_impls[back.status == "ok"].str.len() > 0) == [True] * 6


# ---- the paths that stop before a model is built (here, in this process) -----------------


@pytest.mark.parametrize(
    "per_token, agrees, note",
    [
        ([10.0, 11.0, 12.0], True, ""),
        ([14.0, 15.0, 16.0], False, "end-to-end TPOT 15.000 ms differs from the loop's 10.000"),
        # Mamba-130m, T 1024, N 16 on this CPU: generate(1) is a 50 s prefill
        ([-2452.2, -438.5, 3123.5], None, "end-to-end check inconclusive: per-token rounds"),
        ([1.0, 10.0, 30.0], None, "end-to-end check inconclusive"),
        ([], None, "end-to-end check: no paired round before the deadline"),
    ],
    ids=["agrees", "differs", "negative", "spread-over-1", "no-rounds"],
)
def test_the_end_to_end_verdict(per_token, agrees, note):
    e2e_ms, rel_diff, tolerance, verdict, text = lm_cell.e2e_verdict(per_token, 10.0, 0.1)
    assert verdict is agrees and text.startswith(note) and bool(text) == bool(note)
    if per_token:
        assert rel_diff == pytest.approx((e2e_ms - 10.0) / 10.0)
        assert tolerance >= lm_cell.E2E_TOLERANCE


def _spec(**kw) -> LMCellSpec:
    return LMCellSpec.from_dict(spec(**kw))


def _unavailable_record() -> LMRecord:
    return run_lm_cell(_spec(backend="hf-kernels"))


def test_hf_kernels_on_cpu_is_unavailable_with_its_reason():
    r = _unavailable_record()
    assert r.status == "unavailable"
    assert r.reason.startswith("hf-kernels on cpu: mamba_ssm / causal_conv1d / fla")
    assert r.n_samples == 0 and r.verify is None


def test_hf_static_is_unavailable_on_cpu():
    r = run_lm_cell(_spec(backend="hf-static", model="qwen2.5-0.5b"))
    assert r.status == "unavailable" and "GPU only" in r.reason


PASSED = {"model": "mamba2-130m", "dtype": "fp32", "device": "cpu", "passed": True, "checks": []}


@pytest.fixture
def no_build(monkeypatch):
    """Building the model raises: a test that reaches it fails with this message."""

    def build(*args, **kwargs):
        raise AssertionError("the model was built")

    monkeypatch.setattr(lm_cell, "build", build)


def test_a_failed_gate_is_never_timed(no_build):
    bad = {"name": "logits.prefill_decode_vs_forward", "ok": False, "max_abs_err": 1.0}
    verify = {
        **PASSED,
        "passed": False,
        "checks": [bad, {"name": "cache.formula[T11]", "ok": True}],
    }
    r = run_lm_cell(_spec(), verify=verify)
    assert r.status == "failed", r.reason
    assert r.reason.startswith("correctness gate failed for mamba2-130m (ci, fp32, cpu): logits.")
    assert r.samples_ms == [] and r.ttft_ms_median is None and r.peak_bytes is None
    assert r.verify["failed"] == [bad] and r.verify["checked"] == ["cache.formula[T11]"]


@pytest.mark.slow
@pytest.mark.parametrize("s", SPECS, ids=cell_id)
def test_the_record_keeps_the_tolerance_the_gate_ran_under(measured, s):
    """The gate the cell ran bounds the logits' error by fp32's per-layer rtol times the
    model's depth: the depth counted here from the layers the record reports."""
    from ssmbench.numerics import TOLERANCES

    r = measured[0][cell_id(s)]
    tolerance = r["verify"]["logits_tolerance"]
    depth = len(r["layers"])
    assert depth > 0 and tolerance["n_layers"] == depth
    assert tolerance["bound"] == pytest.approx(TOLERANCES["fp32"][1] * depth)
    assert tolerance["basis"].startswith("the block gate's relative")


def test_a_gate_of_another_dtype_is_refused(no_build):
    r = run_lm_cell(_spec(), verify={**PASSED, "dtype": "bf16"})
    assert r.status == "failed"
    assert (
        r.reason == "the gate's result is for dtype='bf16', not for this cell's 'fp32': not timed"
    )


def test_an_hf_eager_gate_that_ran_a_kernel_is_refused(no_build):
    """A gate run where transformers had bound mamba_ssm (prepare not called first)."""
    kernel = "mamba_ssm.ops.triton.ssd_combined.mamba_chunk_scan_combined"
    layer = {"layer": 0, "class": "Mamba2Block", "attention": None, "kernels": True}
    layer["ran"] = {"mamba2_chunk_scan": kernel}
    r = run_lm_cell(_spec(), verify={**PASSED, "layers": [layer]})
    assert r.status == "failed" and r.samples_ms == []
    assert r.reason.startswith(
        "hf-eager ran kernel packages (1x Mamba2Block [mamba_chunk_scan_combined]): call "
        "ssmbench.lm.backends.prepare"
    )
    assert r.isolation.startswith("not blocked: prepare was not called first")


def test_without_the_gate_the_record_says_so(no_build):
    r = run_lm_cell(_spec(), gate=False)
    assert (r.status, r.reason) == ("failed", "AssertionError: the model was built")
    assert r.verify is None and r.notes == [
        "timed without the correctness gate (gate=False, --no-verify)"
    ]


def test_a_crash_becomes_a_failed_record(monkeypatch):
    def build(*args, **kwargs):
        raise RuntimeError("kernel exploded")

    monkeypatch.setattr(lm_cell, "build", build)
    r = run_lm_cell(_spec(), verify=PASSED)
    assert (r.status, r.reason) == ("failed", "RuntimeError: kernel exploded")
    assert r.ended >= r.started


def test_a_cell_past_its_budget_is_a_timeout(monkeypatch):
    import time

    import torch  # noqa: F401  (loaded before the alarm is armed, never interrupted by it)

    def build(*args, **kwargs):
        time.sleep(5)  # the cell's alarm interrupts this

    monkeypatch.setattr(lm_cell, "build", build)
    timing = Timing(**{**TIMING, "timeout_s": 0.3})
    start = time.monotonic()
    r = run_lm_cell(LMCellSpec.from_dict({**spec(), "timing": timing}), verify=PASSED)
    assert time.monotonic() - start < 3
    assert r.status == "timeout" and r.reason.startswith("the cell's budget of timeout_s=0.3 s")


def test_an_allocation_refused_is_an_oom_record(monkeypatch):
    def build(*args, **kwargs):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried 9 GB")

    monkeypatch.setattr(lm_cell, "build", build)
    r = run_lm_cell(_spec(), verify=PASSED)
    assert r.status == "oom" and "can't allocate memory" in r.reason


@pytest.mark.parametrize(
    "change, message",
    [
        ({"phase": "train"}, "phase must be one of ['prefill', 'decode']"),
        ({"new_tokens": 4}, "a prefill cell makes the first token only"),
        ({"phase": "decode", "new_tokens": 1}, "a decode cell needs new_tokens >= 2"),
        ({"preset": "tiny"}, "preset must be one of ['full', 'reduced', 'ci']"),
        ({"dtype": "fp64"}, "dtype must be one of"),
    ],
    ids=["phase", "prefill-N", "decode-N", "preset", "dtype"],
)
def test_a_bad_spec_is_refused_naming_the_axis(change, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(")):
        _spec(**change)


def _ok_record(**kw) -> LMRecord:
    base = dict(run="t", model="qwen2.5-0.5b", backend="hf-eager", phase="prefill", batch=1)
    base.update(seq_len=8, new_tokens=1, dtype="fp32", device="cpu", preset="ci")
    base.update(samples_ms=[2.0, 3.0], n_samples=2, ttft_ms_median=2.5, ttft_ms_p95=2.95)
    base.update(tokens_per_s=3200.0, weights_bytes=100.0, cache_bytes=20.0)
    base.update(activations_bytes=30.0, peak_bytes=150.0)
    return LMRecord(**{**base, **kw})


@pytest.mark.parametrize(
    "change, field",
    [
        ({"batch": 0}, "field batch: 0 is less than the minimum of 1"),
        ({"phase": "train"}, "field phase: 'train' is not one of"),
        ({"new_tokens": 3}, "field new_tokens: 1 was expected"),
        ({"tokens_per_s": None}, "field tokens_per_s: None is not of type 'number'"),
        ({"status": "failed"}, "field reason: '' should be non-empty"),
        ({"samples_ms": [-1.0]}, "field samples_ms.0: -1.0 is less than the minimum of 0"),
    ],
    ids=["batch", "phase", "prefill-N", "ok-without-throughput", "failed-without-reason", "sample"],
)
def test_a_bad_record_is_refused_naming_file_and_field(tmp_path, change, field):
    path = tmp_path / "r.json"
    with pytest.raises(ValueError, match=f"^{path}: {field}"):
        write_lm_record(path, _ok_record(**change))
    assert not path.exists()


def test_a_record_read_back_is_checked(tmp_path):
    path = tmp_path / "r.json"
    write_lm_record(path, _ok_record())
    assert read_lm_record(path) == _ok_record()
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "cache_bytes": -5}))
    with pytest.raises(ValueError, match=f"{path}: field cache_bytes"):
        read_lm_record(path)


def test_the_lm_table_refuses_a_split_that_does_not_add_up():
    with pytest.raises(Exception, match="memory_split_adds_up"):
        lm_table([_ok_record(peak_bytes=151.0)])


def test_the_lm_table_keeps_a_negative_end_to_end_difference():
    """Mamba-130m at full size on a CPU: generate(1)'s noise swamped the difference."""
    decode = dict(phase="decode", new_tokens=16, ttft_ms_median=None, ttft_ms_p95=None)
    decode.update(tpot_ms_median=53.0, tpot_ms_p95=498.0, e2e_tpot_ms=-438.5, e2e_agrees=None)
    table = lm_table([_ok_record(**decode)])
    assert table.e2e_tpot_ms.tolist() == [-438.5] and table.e2e_agrees.isna().all()


def test_the_lm_table_refuses_two_records_of_one_cell():
    with pytest.raises(Exception, match="unique|duplicate"):
        lm_table([_ok_record(), _ok_record()])


def test_the_path_of_a_cell():
    assert paths.lm_cell_record("cpu", _spec(phase="decode", new_tokens=16, batch=8)) == (
        "results/cpu/lm/mamba2-130m/hf-eager/decode/b8-t48-g16-fp32.json"
    )


def _cli(*args: str, timeout: int = 300):
    cmd = [sys.executable, "-m", "ssmbench", "lm-cell", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env())


CI_MAMBA2 = ["--model", "mamba2-130m", "--backend", "hf-eager", "--preset", "ci"]


def test_the_command_line_refuses_a_prefill_of_several_tokens():
    out = _cli(*CI_MAMBA2, "--seq-len", "8", "--new-tokens", "4")
    assert out.returncode == 2 and "a prefill cell makes the first token only" in out.stderr
    assert out.stdout == ""


@pytest.mark.slow
def test_the_command_line_prints_and_writes_the_record(tmp_path):
    path = tmp_path / "r.json"
    decode = ["--phase", "decode", "--seq-len", "40", "--new-tokens", "3"]
    out = _cli(*CI_MAMBA2, *decode, "--threads", "1", "--out", str(path))
    assert out.returncode == 0, out.stderr[-2000:]
    printed = json.loads(out.stdout)
    assert printed == json.loads(path.read_text())
    assert printed["status"] == "ok" and printed["isolation"].startswith("kernel packages blocked")
    assert (printed["phase"], printed["seq_len"], printed["new_tokens"]) == ("decode", 40, 3)


@pytest.mark.slow
def test_the_command_line_over_its_memory_cap_is_oom():
    """A ci model passes its gate, then a prefill of 64 x 65536 tokens cannot fit in 4 GiB."""
    huge = ["--seq-len", "65536", "--batch", "64", "--threads", "1", "--mem-limit-gb", "4"]
    out = _cli(*CI_MAMBA2, *huge)
    record = json.loads(out.stdout)
    assert out.returncode == 1 and record["status"] == "oom", record["reason"]
    assert "can't allocate memory" in record["reason"] and record["verify"]["passed"]


FORK_CHILD = """
import json, sys
from ssmbench.lm import backends
backends.prepare("hf-eager")
import torch
from ssmbench.lm.build import build
from ssmbench.lm.cache import cache_tensors
from ssmbench.lm.generate import Greedy

out = {}
for model in sys.argv[1:]:
    lm = build(model, "ci", seed=0)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1, lm.config.vocab_size, (2, 19), generator=gen)
    with torch.inference_mode():
        base = Greedy(lm, ids)
        before = [t.clone() for _, _, t in cache_tensors(base.cache)]
        rounds = []
        for _ in range(2):  # two rounds from one prefill, as a decode cell times them
            greedy = base.fork()
            rounds.append([greedy.step() or greedy.token.tolist() for _ in range(4)])
        fresh = Greedy(lm, ids)  # a prefill of its own
        alone = [fresh.step() or fresh.token.tolist() for _ in range(4)]
        after = [t for _, _, t in cache_tensors(base.cache)]
    untouched = len(before) == len(after) and all(torch.equal(a, b) for a, b in zip(before, after))
    out[model] = {"rounds": rounds, "alone": alone, "untouched": untouched}
print(json.dumps(out))
"""


def test_every_round_of_decode_steps_starts_from_the_same_prefill():
    """A decode cell prefills once and times each round of steps from a copy of that cache
    (`Greedy.fork`): SSM caches update their states in place, so without the copy the
    second round would start where the first ended.  Each round's tokens equal those of a
    decode from a prefill of its own, and the prefilled cache is left as it was."""
    models = ["mamba-130m", "mamba2-130m", "qwen2.5-0.5b", "falcon-h1-0.5b"]
    done = subprocess.run(
        [sys.executable, "-c", FORK_CHILD, *models],
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for model, result in json.loads(done.stdout.splitlines()[-1]).items():
        assert result["rounds"] == [result["alone"]] * 2, model
        assert result["untouched"], model
