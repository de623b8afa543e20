"""Attention: reference == naive == torch, the decode step against the scan, and what a step writes
to its cache.

fp32; every comparison goes through :func:`ssmbench.numerics.assert_close`.
"""

from __future__ import annotations

import pytest
import torch

from ssmbench import counts, ops, reference
from ssmbench.matrix import Size
from ssmbench.models import BACKENDS
from ssmbench.models.attention import CONCAT_BACKENDS, KVBuffer, kv_buffer
from ssmbench.numerics import assert_close, to_numpy

# (b, t, h, d): T = 1, lengths that are not powers of two, odd head dims
ATTENTION_SHAPES = [(1, 1, 1, 8), (2, 63, 3, 60), (2, 37, 4, 17)]


def attention_id(shape: tuple[int, ...]) -> str:
    return "B{}-T{}-H{}-D{}".format(*shape)


def attention_inputs(shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*shape, generator=g, dtype=dtype) for _ in range(3))


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", ATTENTION_SHAPES, ids=attention_id)
def test_attention_matches_reference(shape, backend, causal):
    q, k, v = attention_inputs(shape)
    ref = reference.attention(to_numpy(q), to_numpy(k), to_numpy(v), causal=causal)
    assert_close("y", ref, ops.attention(q, k, v, causal=causal, backend=backend), "fp32")


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("shape", ATTENTION_SHAPES, ids=attention_id)
def test_attention_naive_equals_sdpa(shape, causal):
    q, k, v = attention_inputs(shape, seed=1)
    sdpa = ops.attention(q, k, v, causal=causal, backend="torch")
    assert_close("y", sdpa, ops.attention(q, k, v, causal=causal, backend="naive"), "fp32")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", ATTENTION_SHAPES, ids=attention_id)
def test_attention_step_matches_scan(shape, backend):
    q, k, v = attention_inputs(shape, seed=2)
    cache, ys = None, []
    for t in range(shape[1]):
        y_t, cache = ops.attention_step(q[:, t], k[:, t], v[:, t], cache, backend=backend)
        ys.append(y_t)
    assert_close("y", ops.attention(q, k, v, backend=backend), torch.stack(ys, dim=1), "fp32")
    if backend in CONCAT_BACKENDS:
        assert isinstance(cache, tuple) and not isinstance(cache, KVBuffer)
    else:  # grown from nothing, in place: a buffer of at least T tokens, T of them valid
        assert isinstance(cache, KVBuffer) and cache.length == shape[1] <= cache.capacity
        assert int(cache.position) == cache.length
        cache = cache.valid()
    assert_close("k_cache", k, cache[0], "fp32")
    assert_close("v_cache", v, cache[1], "fp32")


def _float_storages(value) -> dict[int, torch.Tensor]:
    """data_ptr -> tensor, for every floating-point tensor reachable from ``value``."""
    found = {}
    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            found[value.untyped_storage().data_ptr()] = value
    elif isinstance(value, (tuple, list)):
        for item in value:
            found.update(_float_storages(item))
    return found


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_decode_step_writes_what_counts_says(backend):
    """Storage a decode step writes, measured: elements changed in the cache it was given
    plus the bytes of new storage in the cache it returns, against ssmbench.counts (one
    token's key and value per attention layer).  The in-place buffer writes exactly that;
    the naive loop's concatenation writes the whole cache again, T + 1 times as much."""
    b, T, h, d = 2, 64, 3, 8
    q, k, v = attention_inputs((b, T + 1, h, d), seed=5)
    prefix = (k[:, :T].contiguous(), v[:, :T].contiguous())
    cache = prefix if backend in CONCAT_BACKENDS else kv_buffer(prefix, T + 1, like=k[:, 0])
    before = {ptr: t.clone() for ptr, t in _float_storages(cache).items()}
    y, new_cache = ops.attention_step(q[:, T], k[:, T], v[:, T], cache, backend=backend)
    changed = sum(
        int((t != before[ptr]).sum()) * t.element_size()
        for ptr, t in _float_storages(cache).items()
    )
    fresh = sum(
        t.untyped_storage().nbytes()
        for ptr, t in _float_storages(new_cache).items()
        if ptr not in before
    )
    size = Size(d_model=h * d, n_layers=1, n_heads=h, head_dim=d, expand=2, d_conv=4, chunk=16)
    analytic = counts.layer("attention", size, 0, 0, b, T, decode=True).step_writes * 4
    assert analytic == 2 * b * h * d * 4
    if backend in CONCAT_BACKENDS:
        assert changed == 0 and fresh == (T + 1) * analytic
    else:
        assert fresh == 0 and changed == analytic  # one token, in place
        assert all(p in before for p in _float_storages(new_cache))  # the same buffers
    reference_y = ops.attention(q, k, v, backend="naive")[:, T]  # the last query, causal
    assert_close("y", reference_y, y, "fp32")
