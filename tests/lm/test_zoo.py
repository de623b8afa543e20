"""The model zoo (config/models.yaml): every full-size entry has its published parameter
count, every ci entry builds and runs, the schema names the key at fault; the hf-eager
isolation really unbinds the kernel packages; backend availability says why."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from ssmbench.lm import backends, zoo

SRC = Path(zoo.__file__).resolve().parents[2]
BUILDABLE = zoo.available()


def test_the_zoo_has_every_class_the_issue_names():
    families = {name: e.family for name, e in zoo.entries().items()}
    assert {n for n, f in families.items() if f == "transformer"} == {
        "qwen2.5-0.5b",
        "qwen2.5-1.5b",
        "llama-3.2-1b",
    }
    assert {n for n, f in families.items() if f == "ssm"} == {
        "mamba-130m",
        "mamba-790m",
        "mamba2-130m",
        "mamba2-780m",
    }
    classes = {e.config_class for e in zoo.entries().values() if not e.unavailable}
    assert {"FalconH1Config", "Zamba2Config", "Qwen3NextConfig"} <= classes


@pytest.mark.parametrize("name", BUILDABLE)
def test_full_size_on_meta_has_the_published_parameter_count(name):
    """Built on the meta device (no memory).  A tied lm_head shares the embedding's tensor
    and is counted once, as the model cards count it (ssmbench.lm.build.count_params)."""
    from ssmbench.lm.build import build, count_params

    model = zoo.entry(name)
    counted = count_params(build(model, "full", device="meta"))
    assert abs(counted / model.params - 1) <= 0.01, (name, counted, model.params)


def test_every_ci_entry_builds_on_cpu_and_runs_a_forward_under_hf_eager():
    """In an hf-eager process: in this one fla is importable, and transformers binds
    Qwen3-Next's gated delta rule to its Triton kernels, which have no CPU driver."""
    done = _python(
        """
        from ssmbench.lm.backends import prepare
        prepare("hf-eager")
        import torch
        from ssmbench.lm.build import build
        from ssmbench.lm.zoo import available
        for name in available():
            lm = build(name, "ci", device="cpu", seed=0)
            ids = torch.randint(0, 512, (1, 7), generator=torch.Generator().manual_seed(0))
            with torch.no_grad():
                logits = lm(input_ids=ids).logits
            c = lm.config
            ok = bool(torch.isfinite(logits).all())
            print(name, c.hidden_size, c.vocab_size, tuple(logits.shape), ok)
        """
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split(" ", 1) for line in done.stdout.strip().splitlines()]
    assert [name for name, _ in rows] == BUILDABLE
    assert {rest for _, rest in rows} == {"64 512 (1, 7, 512) True"}


def test_ci_keeps_the_layer_pattern_kinds():
    from ssmbench.lm.build import make_config

    for name in ("zamba2-1.2b", "qwen3-next-gdn"):
        full, ci = make_config(name, "full"), make_config(name, "ci")
        kinds = getattr(full, "layers_block_type", None) or full.layer_types
        ci_kinds = getattr(ci, "layers_block_type", None) or ci.layer_types
        assert set(ci_kinds) == set(kinds), name


def test_seeded_builds_are_equal_and_other_seeds_differ():
    import torch

    from ssmbench.lm.build import build

    a, b, c = (build("mamba2-130m", "ci", seed=s) for s in (3, 3, 4))
    wa, wb, wc = (m.get_input_embeddings().weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)


def test_hymba_is_unavailable_with_its_reason():
    hymba = zoo.entry("hymba-1.5b")
    assert "flash_attn" in hymba.unavailable and "remote code" in hymba.unavailable
    assert "hymba-1.5b" not in BUILDABLE
    with pytest.raises(zoo.ZooError, match="hymba-1.5b is unavailable: remote code"):
        hymba.config_kwargs("ci")
    ok, why = backends.availability("hymba-1.5b", "hf-eager", "cpu")
    assert not ok and why == hymba.unavailable


def test_reduced_preset_overrides_the_full_config():
    model = zoo.entry("qwen3-next-gdn")
    reduced = model.config_kwargs("reduced")
    assert reduced["hidden_size"] == 1024 and reduced["num_hidden_layers"] == 12
    assert reduced["linear_key_head_dim"] == model.config["linear_key_head_dim"]
    assert zoo.entry("mamba-130m").config_kwargs("reduced") == dict(zoo.entry("mamba-130m").config)


GOOD = {
    "family": "ssm",
    "config_class": "MambaConfig",
    "model_class": "MambaForCausalLM",
    "source": "https://example.org/config.json",
    "config": {"hidden_size": 768},
    "params": {"count": 130e6, "source": "a paper"},
    "ci": {"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 512},
}


def _broken(**change):
    entry = {k: v for k, v in GOOD.items() if change.get(k, ...) is not None}
    entry.update({k: v for k, v in change.items() if v is not None})
    return entry


@pytest.mark.parametrize(
    "entry, message",
    [
        (_broken(params=None), "m: key 'params': missing"),
        (_broken(family="rnn"), "m: key 'family': must be one of"),
        (_broken(params={"count": "many", "source": "x"}), "m: key 'params.count': must be a"),
        (_broken(params={"count": 1e6}), "m: key 'params': must be a mapping of `count`"),
        (_broken(ci={"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 1000}), "key 'ci'"),
        (_broken(ci={"hidden_size": 64, "num_hidden_layers": 9, "vocab_size": 512}), "2 to 6"),
        (_broken(config={}), "m: key 'config': must be a non-empty mapping"),
        (_broken(colour="red"), "m: key 'colour': unknown"),
        (_broken(reduced={"config": {"hidden_size": 8}}), "key 'reduced': must be a mapping"),
        ({"family": "hybrid", "source": "s", "unavailable": ""}, "key 'unavailable'"),
        ({"family": "hybrid", "source": "s", "unavailable": "x", "ci": {}}, "key 'ci'"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_schema_errors_name_the_entry_and_key(tmp_path, entry, message):
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"m": entry}))
    with pytest.raises(zoo.ZooError) as error:
        zoo.load(path)
    assert str(error.value).startswith("models.yaml: m: ") and message in str(error.value)


def test_a_good_entry_loads_and_an_unknown_name_is_refused(tmp_path):
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"m": GOOD}))
    assert zoo.load(path)["m"].params == 130e6
    with pytest.raises(zoo.ZooError, match="no model 'gpt-5'; known: "):
        zoo.entry("gpt-5")


def _python(code: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
        **kwargs,
    )


def test_the_registry_and_builder_import_no_torch():
    done = _python(
        """
        import sys
        import ssmbench.lm.zoo, ssmbench.lm.build, ssmbench.lm.backends
        ssmbench.lm.zoo.entries()
        ssmbench.lm.backends.availability("mamba-130m", "hf-kernels", "cpu")
        print(sorted(m for m in ("torch", "transformers") if m in sys.modules))
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


MODELING = [
    "transformers.models.qwen3_next.modeling_qwen3_next",
    "transformers.models.mamba2.modeling_mamba2",
]


@pytest.mark.slow
def test_hf_eager_unbinds_fla_which_binds_without_the_isolation():
    """fla (flash-linear-attention) is installed here: imported as usual, transformers binds
    Qwen3-Next's gated delta rule to fla's Triton kernels even on a CPU; in an hf-eager
    process it binds transformers' own PyTorch functions."""
    target = "ssmbench.lm.backends:bindings"
    eager = backends.run_in_fresh_process("hf-eager", target, {"modules": MODELING})
    plain = backends.run_in_fresh_process("hf-kernels", target, {"modules": MODELING})
    qwen = MODELING[0]
    assert plain["bound"][qwen]["torch_chunk_gated_delta_rule"].startswith("fla.ops.")
    assert plain["blocked"] == []
    assert set(eager["blocked"]) == set(backends.KERNEL_PACKAGES)
    for module in MODELING:
        assert eager["bound"][module], module
        assert all(impl.startswith(module + ".") for impl in eager["bound"][module].values())


def test_blocking_refuses_after_transformers_is_imported():
    done = _python(
        """
        import transformers
        from ssmbench.lm.backends import block_kernels
        block_kernels()
        """
    )
    assert done.returncode == 1
    assert "IsolationError: cannot block mamba_ssm, causal_conv1d, fla, flash_attn" in done.stderr
    assert "already imported in this process: transformers" in done.stderr


def test_a_blocked_package_does_not_import_and_is_not_found():
    done = _python(
        """
        import importlib.util
        from ssmbench.lm.backends import prepare
        prepare("hf-eager")
        assert importlib.util.find_spec("fla") is None
        try:
            import fla.ops.gated_delta_rule
        except ModuleNotFoundError as e:
            print("refused:", e.name)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() in ("refused: fla", "refused: fla.ops")


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="unknown backend 'hf-fast'; known: "):
        backends.prepare("hf-fast")
    with pytest.raises(ValueError, match="unknown backend"):
        backends.availability("mamba-130m", "hf-fast", "cpu")


@pytest.mark.parametrize("backend", ["hf-kernels", "hf-static"])
@pytest.mark.parametrize("name", ["mamba-130m", "qwen2.5-0.5b"])
def test_gpu_backends_are_unavailable_on_cpu_with_the_reason(backend, name):
    ok, why = backends.availability(name, backend, "cpu")
    assert not ok and why.startswith(f"{backend} on cpu: ") and why.endswith("GPU only")
    assert backends.availability(name, "hf-eager", "cpu")[0]


def test_mamba1_kernels_need_the_cuda_extension_a_triton_only_build_lacks():
    """mamba_ssm here is built without its CUDA extension (selective_scan_cuda)."""
    ok, why = backends.availability("mamba-130m", "hf-kernels", "cuda")
    assert not ok and "selective_scan_cuda" in why


def test_static_availability_follows_the_class_flag():
    assert backends.availability("qwen2.5-0.5b", "hf-static", "cuda")[0]
    ok, why = backends.availability("mamba-130m", "hf-static", "cuda")
    assert not ok and "MambaForCausalLM" in why and "_can_compile_fullgraph is False" in why
