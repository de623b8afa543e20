"""Task models and the training loop: the study's sizes, the heads, the schedule, clipping,
determinism, learning a tiny task, the metrics on hand-made cases, divergence as data."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from torch import nn

from ssmbench.registry import FAMILIES
from ssmbench.tasks.base import IGNORE, METRICS, PAD, TaskData
from ssmbench.tasks.data import make
from ssmbench.tasks.model import (
    REQUIRED_KEYS,
    STUDY_ENTRY,
    build_task_model,
    n_parameters,
    study_kwargs,
    task_size,
)
from ssmbench.tasks.train import (
    TrainConfig,
    auc,
    clip_gradients,
    evaluate,
    lr_at,
    train,
    warmup_steps,
)

# The study's models: entries of /work/shared/anchors/ssmbench/configs/parity.yaml and
# selective_copy.yaml ("From S4 to Mamba-3", MIT), copied as the numbers they are.
PARITY_MODELS = {
    "transformer": {"d_model": 64, "n_layers": 2, "n_heads": 4},
    "s4d": {"d_model": 64, "n_layers": 2, "d_state": 32},
    "mamba": {"d_model": 64, "n_layers": 2, "d_state": 32},
    "mamba2": {"d_model": 64, "n_layers": 2, "d_state": 32, "headdim": 32},
    "mamba3": {"d_model": 64, "n_layers": 2, "d_state": 32, "headdim": 32},
}
SELECTIVE_COPY_MODELS = {
    "transformer": {"d_model": 128, "n_layers": 2, "n_heads": 4},
    "s4d": {"d_model": 128, "n_layers": 2, "d_state": 16},
    "mamba": {"d_model": 128, "n_layers": 2, "d_state": 16},
    "mamba2": {"d_model": 128, "n_layers": 2, "d_state": 32, "headdim": 64},
    "mamba3": {"d_model": 128, "n_layers": 2, "d_state": 32, "headdim": 64},
}
# family -> (n_heads, head_dim, d_state) that task_size must give, worked out by hand
PARITY_SIZES = {
    "attention": (4, 16, 0),
    "s4d": (4, 16, 32),  # heads unused; DEFAULT_HEADS
    "mamba": (4, 16, 32),
    "mamba2": (2, 32, 32),
    "mamba3": (2, 32, 32),
    "deltanet": (4, 16, 0),  # the transformer's entry, 4 heads
    "hybrid": (2, 32, 32),  # the mamba2 entry; its attention layers: 64 // 32 heads
}
SELECTIVE_COPY_SIZES = {
    "attention": (4, 32, 0),
    "s4d": (4, 32, 16),
    "mamba": (4, 32, 16),
    "mamba2": (2, 64, 32),
    "mamba3": (2, 64, 32),
    "deltanet": (4, 32, 0),
    "hybrid": (2, 64, 32),
}

# tiny models for the tests: d_model 16, two layers (the hybrid's pattern MA needs both)
TINY = {
    "attention": {"d_model": 16, "n_layers": 2, "n_heads": 2},
    "s4d": {"d_model": 16, "n_layers": 2, "d_state": 4},
    "mamba": {"d_model": 16, "n_layers": 2, "d_state": 4},
    "mamba2": {"d_model": 16, "n_layers": 2, "d_state": 4, "headdim": 8},
    "mamba3": {"d_model": 16, "n_layers": 2, "d_state": 4, "headdim": 8},
    "deltanet": {"d_model": 16, "n_layers": 2, "n_heads": 2},
    "hybrid": {"d_model": 16, "n_layers": 2, "d_state": 4, "headdim": 8},
}


def copy_previous(n: int, seq_len: int = 16, vocab: int = 8, seed: int = 0) -> TaskData:
    """Token task: the class at t is the input at t - 1 (nothing scored at t = 0)."""
    inputs = np.random.default_rng(seed).integers(1, vocab, (n, seq_len))
    targets = np.full_like(inputs, IGNORE)
    targets[:, 1:] = inputs[:, :-1]
    return TaskData("copy_previous", f"s{seed}", "token", inputs, targets, vocab, vocab)


def first_token(n: int, seq_len: int = 12, vocab: int = 8, seed: int = 0) -> TaskData:
    """Sequence task: the class is whether the first token is odd."""
    inputs = np.random.default_rng(seed).integers(1, vocab, (n, seq_len))
    return TaskData("first_token", f"s{seed}", "sequence", inputs, inputs[:, 0] % 2, vocab, 2)


def config(**overrides) -> TrainConfig:
    values = {"epochs": 2, "batch_size": 16, "lr": 3e-3, "grad_clip": 1.0, "warmup_frac": 0.1}
    return TrainConfig.from_dict({**values, **overrides})


# --- task_size ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("models", "sizes"),
    [(PARITY_MODELS, PARITY_SIZES), (SELECTIVE_COPY_MODELS, SELECTIVE_COPY_SIZES)],
    ids=["parity", "selective_copy"],
)
@pytest.mark.parametrize("family", FAMILIES)
def test_task_size_of_the_study_configs(family, models, sizes):
    size, d_state = task_size(family, study_kwargs(family, models))
    d_model = models["transformer"]["d_model"]
    assert (size.d_model, size.n_layers) == (d_model, 2)
    assert (size.n_heads, size.head_dim, d_state) == sizes[family]
    assert (size.expand, size.d_conv, size.chunk) == (2, 4, 32)


def test_every_family_has_a_study_entry_and_keys():
    # a family added to the registry must say how the study's configs size it
    assert tuple(STUDY_ENTRY) == tuple(REQUIRED_KEYS) == FAMILIES


def test_task_size_takes_overrides_of_the_block_settings():
    size, _ = task_size("mamba", {**PARITY_MODELS["mamba"], "expand": 1, "d_conv": 2, "chunk": 8})
    assert (size.expand, size.d_conv, size.chunk) == (1, 2, 8)


@pytest.mark.parametrize(
    ("family", "cfg", "message"),
    [
        ("transformer", PARITY_MODELS["transformer"], "unknown family 'transformer'"),
        ("mamba", {**PARITY_MODELS["mamba"], "headdim": 16}, "unknown keys ['headdim']"),
        ("attention", {**PARITY_MODELS["transformer"], "dropout": 1}, "unknown keys ['dropout']"),
        ("mamba2", {"d_model": 64, "n_layers": 2, "d_state": 32}, "missing keys ['headdim']"),
        ("s4d", {"d_model": 64, "n_layers": 2.5, "d_state": 32}, "n_layers must be a positive"),
        ("s4d", {"d_model": 64, "n_layers": 2, "d_state": 0}, "d_state must be a positive"),
        ("attention", {"d_model": 64, "n_layers": 2, "n_heads": 5}, "not divisible by n_heads 5"),
        ("mamba2", {**PARITY_MODELS["mamba2"], "headdim": 48}, "not divisible by headdim 48"),
    ],
    ids=["family", "key-mamba", "key-attention", "missing", "float", "zero", "heads", "headdim"],
)
def test_task_size_refuses(family, cfg, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        task_size(family, cfg)


def test_study_kwargs_names_a_missing_entry():
    with pytest.raises(KeyError, match="hybrid: the study's models have no 'mamba2' entry"):
        study_kwargs("hybrid", {"transformer": PARITY_MODELS["transformer"]})


# --- TaskModel -------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_task_model_shapes(family, one_thread):
    tokens, sequences = copy_previous(3, seq_len=11), first_token(3, seq_len=11)
    token_model = build_task_model(family, TINY[family], tokens)
    sequence_model = build_task_model(family, TINY[family], sequences)
    assert token_model(torch.from_numpy(tokens.inputs)).shape == (3, 11, 8)
    assert sequence_model(torch.from_numpy(sequences.inputs)).shape == (3, 2)


@pytest.mark.parametrize("family", FAMILIES)
def test_sequence_head_ignores_padding(family, one_thread):
    data = first_token(4, seq_len=10)
    model = build_task_model(family, TINY[family], data, seed=1)
    inputs = torch.from_numpy(data.inputs)
    padded = torch.cat([inputs, torch.full((4, 7), PAD)], dim=1)  # right-padded to 17
    with torch.no_grad():
        logits, padded_logits = model(inputs), model(padded)
    assert (padded_logits - logits).abs().max() < 1e-6
    # and the padding is what is ignored: a real token in its place changes the logits
    with torch.no_grad():
        other = model(torch.cat([inputs, torch.full((4, 7), 3)], dim=1))
    assert (other - logits).abs().max() > 1e-4


def test_token_model_is_causal(one_thread):
    data = copy_previous(2, seq_len=12)
    model = build_task_model("attention", TINY["attention"], data)
    inputs = torch.from_numpy(data.inputs)
    changed = inputs.clone()
    changed[:, 8:] = 1 + (changed[:, 8:] % 7)  # change the suffix only
    with torch.no_grad():
        before, after = model(inputs), model(changed)
    assert torch.equal(before[:, :8], after[:, :8])
    assert not torch.equal(before[:, 8:], after[:, 8:])


def test_build_task_model_is_seeded():
    data = copy_previous(2)
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    first = build_task_model("mamba2", TINY["mamba2"], data, seed=5)
    assert torch.equal(torch.random.get_rng_state(), state)  # the global generator untouched
    again = build_task_model("mamba2", TINY["mamba2"], data, seed=5)
    other = build_task_model("mamba2", TINY["mamba2"], data, seed=6)
    for (name, p), q in zip(first.named_parameters(), again.parameters(), strict=True):
        assert torch.equal(p, q), name
    assert not torch.equal(first.embed.weight, other.embed.weight)
    stacks = zip(first.stack.parameters(), other.stack.parameters(), strict=True)
    assert any(not torch.equal(p, r) for p, r in stacks)


def test_n_parameters_counts_every_tensor_once():
    data = copy_previous(2)
    model = build_task_model("attention", TINY["attention"], data)
    # embedding 8x16, head 16x8+8, per layer qkv 16x48 and out 16x16 (no biases) and a norm
    # of 16; the final norm 16
    assert n_parameters(model) == 8 * 16 + (16 * 8 + 8) + 2 * (16 * 48 + 16 * 16 + 16) + 16


def test_build_task_model_builds_a_named_variant_from_mixer_options():
    """mixer_options reach every layer's build_mixer; none builds the benchmark's block;
    a family whose build_mixer takes no options refuses them."""
    data = copy_previous(2)
    plain = build_task_model("mamba3", TINY["mamba3"], data, seed=1)
    variant = build_task_model(
        "mamba3", TINY["mamba3"], data, seed=1, mixer_options={"A_mode": "per-head"}
    )
    assert all(m.A_mode == "data" and not hasattr(m, "A_log") for m in plain.stack.mixers)
    assert all(m.A_mode == "per-head" and hasattr(m, "A_log") for m in variant.stack.mixers)
    assert len(variant.stack.mixers) == TINY["mamba3"]["n_layers"]
    with pytest.raises(TypeError, match="A_mode"):
        build_task_model("mamba2", TINY["mamba2"], data, mixer_options={"A_mode": "per-head"})


@pytest.mark.parametrize("family", ["mamba", "mamba2", "mamba3"])
def test_gated_blocks_are_blind_to_a_zero_pad_row_and_see_a_learned_one(family):
    """Parity's bit 0 is PAD's id: with PAD's row zero, a gated block without input bias
    outputs zero there in every layer, so every bit-0 position gets the same logits
    whatever the weights; with learned_pad they differ with the prefix."""
    data = make("parity", "train", 4, seed=0, seq_len=24)
    inputs = torch.as_tensor(data.inputs)
    assert (inputs == PAD).sum() > 10
    for learned_pad in (False, True):
        model = build_task_model(family, TINY[family], data, seed=3, learned_pad=learned_pad)
        with torch.no_grad():
            for param in model.stack.parameters():  # any weights, biases included
                param.add_(0.3 * torch.randn(param.shape, generator=torch.Generator()))
            at_pad = model(inputs)[inputs == PAD]  # (positions, classes)
        spread = (at_pad - at_pad[0]).abs().max()
        assert (spread == 0) if not learned_pad else (spread > 1e-3), (learned_pad, spread)
    assert not model.embed.weight[PAD].eq(0).all()


def test_build_task_model_refuses_an_unknown_backend():
    with pytest.raises(ValueError, match="unknown backend 'cuda'"):
        build_task_model("mamba", TINY["mamba"], copy_previous(2), backend="cuda")


# --- the schedule and clipping ---------------------------------------------------------------


def test_lr_warms_up_linearly_then_decays_as_a_cosine():
    total, lr = 20, 1e-2
    warm = warmup_steps(config(warmup_frac=0.1), total)
    assert warm == 2
    assert lr_at(0, total, warm, lr) == pytest.approx(lr / 2)
    assert lr_at(1, total, warm, lr) == pytest.approx(lr)
    assert lr_at(2, total, warm, lr) == pytest.approx(lr)  # the cosine's start
    assert lr_at(11, total, warm, lr) == pytest.approx(lr / 2)  # 9 of its 18 steps
    assert lr_at(19, total, warm, lr) == pytest.approx(lr * (1 + math.cos(math.pi * 17 / 18)) / 2)
    assert lr_at(20, total, warm, lr) == pytest.approx(0.0, abs=1e-15)  # where the run ends
    assert warmup_steps(config(warmup_frac=0.05), 30) == 2  # 1.5 rounded up
    assert warmup_steps(config(warmup_frac=0.0), 30) == 0
    assert lr_at(0, 10, 0, lr) == pytest.approx(lr)


def test_train_applies_the_schedule_per_step(one_thread):
    data = copy_previous(40)  # 3 batches of 16 a epoch: 6 steps
    model = build_task_model("s4d", TINY["s4d"], data)
    cfg = config(epochs=2, lr=1e-2, warmup_frac=0.3)  # ceil(1.8) = 2 warm-up steps
    result = train(model, data, {}, cfg, seed=0)
    assert result.n_steps == 6
    assert result.lrs == pytest.approx([lr_at(s, 6, 2, 1e-2) for s in range(6)])
    assert result.lrs[:3] == pytest.approx([5e-3, 1e-2, 1e-2])


def test_clip_gradients_bounds_the_global_norm():
    net = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 3))
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
    (net(x).sum() * 1e4).backward()
    before = torch.cat([p.grad.flatten() for p in net.parameters()])
    norm = clip_gradients(net, 1.0)
    after = torch.cat([p.grad.flatten() for p in net.parameters()])
    assert norm == pytest.approx(float(before.norm()), rel=1e-6) and norm > 100
    assert float(after.norm()) <= 1.0 + 1e-5
    assert torch.allclose(after * norm, before, rtol=1e-4)  # scaled, not bent
    assert clip_gradients(net, None) == pytest.approx(float(after.norm()), rel=1e-6)


# --- the loop --------------------------------------------------------------------------------


def test_training_is_deterministic_for_a_seed(one_thread):
    train_data, test = copy_previous(48), copy_previous(16, seed=1)
    runs = []
    for seed in (0, 0, 1):
        model = build_task_model("mamba2", TINY["mamba2"], train_data, seed=0)
        runs.append(train(model, train_data, {"test": test}, config(), seed=seed))
    first, again, other = runs
    assert first.status == again.status == other.status == "ok"
    assert first.steps == again.steps  # bit-identical floats
    assert first.final == again.final
    assert [h["eval"] for h in first.history] == [h["eval"] for h in again.history]
    assert first.steps != other.steps  # another batch order
    assert first.steps[0] != other.steps[0]


@pytest.mark.parametrize(
    ("family", "cfg"),
    [
        ("attention", {"d_model": 32, "n_layers": 2, "n_heads": 2}),
        ("mamba", {"d_model": 32, "n_layers": 1, "d_state": 8}),  # its own backward
        ("mamba2", {"d_model": 32, "n_layers": 1, "d_state": 8, "headdim": 16}),
    ],
    ids=["attention", "mamba", "mamba2"],
)
def test_copy_previous_token_is_learned(family, cfg, one_thread):
    train_data, test = copy_previous(512), copy_previous(128, seed=1)
    model = build_task_model(family, cfg, train_data, seed=0)
    before = evaluate(model, test, 64)["token_accuracy"]
    calls = []
    cfg = config(epochs=10, batch_size=32, warmup_frac=0.05)
    result = train(
        model, train_data, {"test": test}, cfg, seed=0, progress=lambda *a: calls.append(a)
    )
    assert result.status == "ok" and result.reason == ""
    assert result.n_steps == len(result.steps) == 10 * 16
    assert before < 0.3
    assert result.final["test"]["token_accuracy"] > 0.95
    assert result.steps[-1] < result.steps[0] / 5
    assert [h["epoch"] for h in result.history] == list(range(1, 11))
    assert [c[:2] for c in calls] == [(e, 10) for e in range(1, 11)]
    assert [c[2] for c in calls] == [h["train_loss"] for h in result.history]
    assert result.history[-1]["train_loss"] == pytest.approx(np.mean(result.steps[-16:]))


def test_final_metrics_without_per_epoch_evaluation(one_thread):
    train_data, test = first_token(32), first_token(16, seed=1)
    model = build_task_model("s4d", TINY["s4d"], train_data)
    result = train(model, train_data, {"test": test}, config(eval_every_epoch=False), seed=0)
    assert result.status == "ok"
    assert all("eval" not in entry for entry in result.history)
    assert set(result.final) == {"test"}
    assert tuple(result.final["test"]) == METRICS["sequence"]
    assert result.final["test"] == evaluate(model, test, 16)


def test_result_to_dict_is_json(one_thread):
    train_data, test = copy_previous(32), copy_previous(16, seed=1)
    model = build_task_model("mamba", TINY["mamba"], train_data)
    result = train(model, train_data, {"test": test}, config(), seed=0)
    record = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert record["status"] == "ok" and record["n_steps"] == 4
    assert record["steps"] == result.steps
    assert set(record["history"][0]) == {"epoch", "train_loss", "seconds", "eval"}
    assert set(record["final"]["test"]) == set(METRICS["token"])


# --- divergence --------------------------------------------------------------------------------


def test_a_nan_model_fails_at_its_first_step(one_thread):
    train_data, test = copy_previous(32), copy_previous(16, seed=1)
    model = build_task_model("mamba2", TINY["mamba2"], train_data)
    with torch.no_grad():
        model.head.bias[0] = math.nan
    result = train(model, train_data, {"test": test}, config(), seed=0)
    assert result.status == "failed"
    assert result.reason == "diverged at step 1 of 4 (epoch 1): loss is nan"
    assert result.n_steps == 1 and math.isnan(result.steps[0])
    assert result.history == [] and result.final == {}
    record = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert record["steps"] == [None]


def test_an_infinite_gradient_fails_before_the_update(one_thread):
    train_data = copy_previous(32)
    model = build_task_model("deltanet", TINY["deltanet"], train_data)
    model.head.weight.register_hook(lambda grad: grad * math.inf)  # a finite loss, inf grads
    weights = model.head.weight.detach().clone()
    result = train(model, train_data, {}, config(), seed=0)
    assert result.status == "failed"
    assert result.reason.startswith("diverged at step 1 of 4 (epoch 1): gradient norm is ")
    assert result.reason.endswith(f"(loss {result.steps[0]:.4g})")
    assert result.n_steps == 1 and math.isfinite(result.steps[0])
    assert torch.equal(model.head.weight, weights)  # not stepped with it


def test_a_huge_learning_rate_fails_and_keeps_the_curve(one_thread):
    train_data, test = copy_previous(64), copy_previous(16, seed=1)
    model = build_task_model("attention", TINY["attention"], train_data)
    cfg = config(epochs=20, lr=1e6, warmup_frac=0.0, grad_clip=None)
    result = train(model, train_data, {"test": test}, cfg, seed=0)
    assert result.status == "failed"
    step = result.n_steps
    assert f"diverged at step {step} of 80 (epoch " in result.reason
    assert "loss is" in result.reason or "gradient norm is" in result.reason
    assert 1 < step < 80 and len(result.steps) == step
    assert all(math.isfinite(loss) for loss in result.steps[:-1])
    assert len(result.history) == (step - 1) // 4  # the epochs finished before it
    assert result.final == {}


# --- evaluation on hand-made cases -------------------------------------------------------------


class FixedLogits(nn.Module):
    """Returns ``logits[row]`` for each sequence whose first token is ``row + 1``."""

    def __init__(self, logits: torch.Tensor):
        super().__init__()
        self.logits = nn.Parameter(logits)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.logits[inputs[:, 0] - 1]


def test_evaluate_token_metrics_by_hand():
    # two sequences of 4 positions, 3 classes; position 0 unscored
    targets = np.array([[IGNORE, 1, 2, 0], [IGNORE, 2, 2, 1]])
    inputs = np.array([[1, 5, 5, 5], [2, 5, 5, 5]])
    predicted = np.array([[0, 1, 2, 0], [2, 2, 0, 1]])  # row 0 all right; row 1 misses t=2
    logits = torch.full((2, 4, 3), -1.0)
    logits.scatter_(2, torch.from_numpy(predicted)[..., None], 1.0)
    data = TaskData("hand", "test", "token", inputs, targets, 6, 3)
    metrics = evaluate(FixedLogits(logits), data, batch_size=1)
    # 5 of 6 scored positions right; one of two sequences entirely right
    assert metrics["token_accuracy"] == pytest.approx(5 / 6)
    assert metrics["sequence_success"] == pytest.approx(0.5)
    total = math.e + 2 / math.e  # softmax's denominator of (1, -1, -1)
    right, wrong = -math.log(math.e / total), -math.log(1 / math.e / total)
    assert metrics["loss"] == pytest.approx((5 * right + wrong) / 6)


def test_evaluate_sequence_metrics_by_hand():
    labels = np.array([1, 0, 1, 0])
    margins = torch.tensor([2.0, -1.0, 0.5, 0.5])  # logit 1 minus logit 0
    logits = torch.stack([torch.zeros(4), margins], dim=1)
    data = TaskData("hand", "test", "sequence", np.arange(1, 5)[:, None], labels, 5, 2)
    model = FixedLogits(logits)
    model.train()
    metrics = evaluate(model, data, batch_size=3)
    assert model.training  # the mode is restored
    assert metrics["accuracy"] == pytest.approx(3 / 4)  # the last is called 1, is 0
    # positives {2, 0.5} over negatives {-1, 0.5}: 1 + 1 + 1 + a tie's 1/2 of 4 pairs
    assert metrics["auc"] == pytest.approx(3.5 / 4)
    expected = -np.log(1 / (1 + np.exp(-np.array([2.0, 1.0, 0.5, -0.5])))).mean()
    assert metrics["loss"] == pytest.approx(expected)


def test_auc_by_hand():
    assert auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)  # sklearn's example
    assert auc([3, 2, 1], [1, 1, 0]) == 1.0
    assert auc([3, 2, 1], [0, 0, 1]) == 0.0
    assert auc([1, 1, 1, 1], [0, 1, 0, 1]) == 0.5
    assert math.isnan(auc([1, 2], [1, 1]))


# --- refusals ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"epochs": 1, "batch_size": 8, "lr": 1e-3, "seed": 42}, r"unknown keys \['seed'\]"),
        ({"epochs": 1, "lr": 1e-3}, r"missing keys \['batch_size'\]"),
        ({"epochs": 1, "batch_size": 8, "lr": 1e-3, "scheduler": "linear"}, "scheduler must be"),
        ({"epochs": 0, "batch_size": 8, "lr": 1e-3}, "epochs must be a positive integer, got 0"),
        ({"epochs": 1, "batch_size": 8, "lr": -1.0}, "lr must be a positive number"),
        ({"epochs": 1, "batch_size": 8, "lr": 1e-3, "warmup_frac": 1.0}, r"warmup_frac must be"),
        ({"epochs": 1, "batch_size": 8, "lr": 1e-3, "grad_clip": 0}, "grad_clip must be"),
        ({"epochs": 1, "batch_size": 8, "lr": 1e-3, "eval_every_epoch": 1}, "eval_every_epoch"),
    ],
    ids=["unknown", "missing", "scheduler", "epochs", "lr", "warmup", "clip", "eval-flag"],
)
def test_train_config_refuses(values, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig.from_dict(values)


def test_train_refuses_data_the_model_was_not_built_for(one_thread):
    data = copy_previous(8)
    model = build_task_model("s4d", TINY["s4d"], data)
    wider = copy_previous(8, vocab=12)
    with pytest.raises(
        ValueError, match="eval set 'long' copy_previous/s0: 12 classes, the model has 8"
    ):
        train(model, data, {"long": wider}, config(), seed=0)
    with pytest.raises(ValueError, match="train first_token/s0: kind 'sequence'"):
        train(model, first_token(8), {}, config(), seed=0)


def test_train_refuses_rows_with_nothing_scored(one_thread):
    data = copy_previous(8)
    targets = data.targets.copy()
    targets[5] = IGNORE
    bare = TaskData(data.task, data.split, "token", data.inputs, targets, 8, 8)
    model = build_task_model("s4d", TINY["s4d"], data)
    with pytest.raises(ValueError, match="1 rows with no scored target \\(first: row 5\\)"):
        train(model, bare, {}, config(), seed=0)
