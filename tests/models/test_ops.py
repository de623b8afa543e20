"""The operator dispatch (:mod:`ssmbench.ops`): an unknown backend is refused naming the ones
there are.  Each operator's numbers are checked in its family's module (test_attention,
test_mamba, test_s4d, test_mamba2, test_mamba3, test_deltanet)."""

from __future__ import annotations

import pytest

from ssmbench import ops
from ssmbench.models import build_model
from tests.models.test_attention import attention_inputs
from tests.models.test_mamba import scan_inputs
from tests.models.test_models import SMALL_SIZE


def test_unknown_backend_raises():
    q, k, v = attention_inputs((1, 3, 1, 4))
    args, kwargs = scan_inputs((1, 3, 4, 2))
    with pytest.raises(ValueError, match="'cuda-kernels'.*naive"):
        ops.attention(q, k, v, backend="cuda-kernels")
    with pytest.raises(ValueError, match="'cuda-kernels'.*naive"):
        ops.attention_step(q[:, 0], k[:, 0], v[:, 0], backend="cuda-kernels")
    with pytest.raises(ValueError, match="'cuda-kernels'.*naive"):
        ops.selective_scan(*args, **kwargs, backend="cuda-kernels")
    u, delta, A, B, C = args
    with pytest.raises(ValueError, match="'cuda-kernels'.*naive"):
        ops.selective_scan_step(u[:, 0], delta[:, 0], A, B[:, 0], C[:, 0], backend="cuda-kernels")
    with pytest.raises(ValueError, match="'cuda-kernels'"):
        build_model("mamba", SMALL_SIZE, d_state=5, backend="cuda-kernels")
