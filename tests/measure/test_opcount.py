"""Counting a call's operators (ssmbench.measure.opcount): ATen ops on a CPU against counts
derived by hand from the code that runs, with and without inference mode; the call's
result unchanged by counting; GPU kernel counting over fake profiler events."""

from __future__ import annotations

import types

import pytest
import torch

from ssmbench.errors import CellTimeout
from ssmbench.measure import opcount
from ssmbench.measure.opcount import count_aten_ops, count_cuda_kernels, count_ops, kernel_names

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.mark.parametrize("inference", [False, True], ids=["autograd", "inference"])
def test_three_plain_ops_are_three(inference):
    a, b = torch.randn(3, 3), torch.randn(3, 3)
    with torch.inference_mode(inference):
        count = count_aten_ops(lambda: (a + b, torch.mm(a, b), a.exp()))
    assert count.n_ops == 3 and count.kind == "aten_ops"
    assert count.by_name == {"aten.add.Tensor": 1, "aten.mm.default": 1, "aten.exp.default": 1}
    assert "TorchDispatchMode" in count.method


@pytest.mark.parametrize("inference", [False, True], ids=["autograd", "inference"])
@pytest.mark.parametrize(
    "shape, expected",
    [
        # F.linear on a matrix: the weight transposed (a view), then bias + x W^T in one
        ((2, 4), {"aten.t.default": 1, "aten.addmm.default": 1}),
        # on a (b, t, d) input the leading axes are folded into one and unfolded after:
        # view, t, addmm, view
        ((2, 5, 4), {"aten.view.default": 2, "aten.t.default": 1, "aten.addmm.default": 1}),
    ],
    ids=["2d", "3d"],
)
def test_a_linear_layer_counts_its_parts_not_itself(shape, expected, inference):
    """linear is composite (CompositeImplicitAutograd): it reaches the mode whole under
    inference mode and in parts under autograd unless the counter decomposes it."""
    layer = torch.nn.Linear(4, 3)
    x = torch.randn(*shape)
    with torch.inference_mode(inference):
        count = count_aten_ops(lambda: layer(x))
    assert count.by_name == expected and count.n_ops == sum(expected.values())


def test_views_and_factories_count_but_python_work_does_not():
    x = torch.randn(3, 4)

    def fn():
        x.shape, x.size(0), x.dtype  # metadata: no dispatch
        return x[0], x.view(12), x.t(), torch.zeros(2)  # select, view, t, zeros

    assert count_aten_ops(fn).n_ops == 4


def test_a_delta_rule_step_counts_what_its_code_dispatches():
    """One gated DeltaNet layer's decode step (ssmbench.models.deltanet.delta_rule_step) in
    float32 with a state, counted from its code: the shape checks, ``widen`` and
    ``o.to(q.dtype)`` dispatch nothing (no dtype changes), and _recurrent_update runs

        exp(g)[..., None, None]; state * that      exp, unsqueeze x2, mul          4
        (k[..., None, :] @ state).squeeze(-2)      unsqueeze, matmul (6), squeeze  8
        beta[..., None] * (v - retrieved)          unsqueeze, sub, mul             3
        state + k[..., :, None] * delta[..., None, :]   unsqueeze x2, mul, add     4
        (q[..., None, :] @ state).squeeze(-2)      as the second line              8

    where a batched ``a @ b`` of (b, h, 1, k) and (b, h, k, v) broadcasts both to one batch
    shape (expand x2), folds the batch axes (view x2), multiplies (bmm) and unfolds
    (view): 6; a full slice ``:`` is no op.  27 in all."""
    from ssmbench.models.deltanet import delta_rule_step

    b, h, dk, dv = 2, 3, 4, 5
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(b, h, dk, generator=gen) for _ in range(2))
    v = torch.randn(b, h, dv, generator=gen)
    beta = torch.rand(b, h, generator=gen)
    g = -torch.rand(b, h, generator=gen)
    state = torch.randn(b, h, dk, dv, generator=gen)
    with torch.inference_mode():
        count = count_aten_ops(lambda: delta_rule_step(q, k, v, beta, g, state))
    assert count.n_ops == 27, count.by_name
    assert count.by_name["aten.bmm.default"] == 2 and count.by_name["aten.expand.default"] == 4


def test_counting_does_not_change_the_result():
    layer = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 8))
    x = torch.randn(4, 8)
    with torch.inference_mode():
        plain = layer(x)
        seen = []
        count = count_aten_ops(lambda: seen.append(layer(x)))
    assert count.n_ops == 5  # (t, addmm), gelu, (t, addmm)
    assert torch.equal(seen[0], plain)


class Event:
    """A kineto event as kernel_names reads it: a name and a device type."""

    def __init__(self, name: str, device: str):
        self._name, self._device = name, types.SimpleNamespace(name=device)

    def name(self):
        return self._name

    def device_type(self):
        return self._device


EVENTS = [
    Event("aten::add", "CPU"),  # the op that launched the kernel, on the host
    Event("cudaLaunchKernel", "CPU"),  # the runtime call
    Event("void at::native::vectorized_elementwise_kernel<4, add>", "CUDA"),
    Event("Memcpy HtoD (Pageable -> Device)", "CUDA"),
    Event("Memset (Device)", "CUDA"),
    Event("ampere_sgemm_32x32_sliced1x4_tn", "CUDA"),
    Event("void at::native::vectorized_elementwise_kernel<4, add>", "CUDA"),
]


def test_kernels_are_the_device_events_that_are_not_memory_traffic():
    assert kernel_names(EVENTS) == [
        "void at::native::vectorized_elementwise_kernel<4, add>",
        "ampere_sgemm_32x32_sliced1x4_tn",
        "void at::native::vectorized_elementwise_kernel<4, add>",
    ]


@pytest.mark.parametrize("graph, kind", [(False, "cuda_kernels"), (True, "graph_kernels")])
def test_cuda_kernels_are_counted_over_one_call(graph, kind):
    calls = []

    def events(fn):  # the profiler's surface: one call of fn, its events
        fn()
        return EVENTS

    count = count_cuda_kernels(lambda: calls.append(1), graph=graph, events=events)
    assert calls == [1]  # one call, profiled
    assert count.n_ops == 3 and count.kind == kind
    assert count.by_name == {
        "void at::native::vectorized_elementwise_kernel<4, add>": 2,
        "ampere_sgemm_32x32_sliced1x4_tn": 1,
    }
    assert ("replay" in count.method) is graph


@pytest.mark.parametrize(
    "device, graph, kind",
    [("cpu", False, "aten_ops"), ("cuda", False, "cuda_kernels"), ("cuda", True, "graph_kernels")],
)
def test_a_count_that_fails_is_none_with_its_reason(monkeypatch, device, graph, kind):
    def late():
        raise CellTimeout("cell deadline passed (0.1 s ago)")

    monkeypatch.setattr(opcount, "_kineto_events", lambda fn: fn())
    count = count_ops(late, device, graph=graph)
    assert count.n_ops is None and count.kind == kind and count.by_name == {}
    assert count.method == "not counted: CellTimeout: cell deadline passed (0.1 s ago)"


def test_compiled_code_on_a_cpu_is_not_counted():
    """While a dispatch mode is active Dynamo runs the eager function, so the mode would see
    the four eager ops here, not the compiled call's one fused kernel: no count."""
    calls = []
    count = count_ops(lambda: calls.append(1), "cpu", compiled=True)
    assert calls == [] and count.n_ops is None and count.kind == "aten_ops"
    assert count.method.startswith("not counted: under a TorchDispatchMode torch.compile")


def test_a_gpu_call_whose_kernels_the_profiler_missed_is_not_counted():
    host_only = [e for e in EVENTS if e.device_type().name == "CPU"]
    count = count_cuda_kernels(lambda: None, graph=True, events=lambda fn: host_only)
    assert count.n_ops is None and count.kind == "graph_kernels"
    assert count.method.startswith("not counted: torch.profiler recorded no GPU kernel")
