"""Operator profile of one callable: where its time goes, by kind of operator.

Method.  ``fn`` runs ``warmup`` times untraced (Triton autotune and JIT stay out), then
``iters`` times under ``torch.profiler``; every bucket's time is divided by ``iters``.

- CUDA (``time_basis = "cuda_device"``): the device timeline only: each kernel, memcpy and
  memset event counts its own start-to-end time on the GPU.  The CPU time of the ops that
  launched them is not added, and GPU user-annotation ranges (which span kernels) are not
  events of their own.  Kernels on concurrent streams add up, so the total can exceed wall time.
- CPU (``time_basis = "cpu_self"``): the *self* CPU time of each operator: its duration minus
  that of the operators it called.  A wrapper (``aten::linear`` -> ``aten::addmm``,
  ``aten::einsum`` -> ``aten::bmm``) thus keeps only its own dispatch overhead and the nested
  work is counted once.  ``record_function`` ranges are scopes, not operators: their self
  time (Python between ops) is left out, as is anything outside every operator.

Buckets.  :func:`bucket` names the kind of one operator or kernel from its name alone, by the
ordered rules in ``_ATEN_RULES`` (CPU ``aten::`` operators, matched by operator) and
``_KERNEL_RULES`` (everything else: CUDA and Triton kernels, custom ops, annotations);
the first rule that matches wins, and a name no rule matches is ``other``.

Attribution.  :func:`attribute` then uses the enclosing operators and annotations (innermost
first; on CUDA those of the operator that launched the kernel):

1. ``attention`` and ``ssm_scan`` are *scopes*: everything inside an operator or a
   ``record_function`` range whose name falls in one of them belongs to it, so an SSM scan
   written as einsums and cumsums counts as ``ssm_scan`` once its code runs inside
   ``record_function("ssmbench::selective_scan")`` (or any name :func:`bucket` puts there).
2. Otherwise an operator keeps its own bucket;
3. and one whose own bucket is ``other`` (views, allocation, dispatch) takes its nearest
   classified ancestor's: the ``aten::view`` inside ``aten::linear`` is GEMM overhead.

What the profile misses: Python time between operators (CPU), host-side launch overhead and
idle gaps (CUDA), and without scopes, an unfused scan or attention written in PyTorch is
split over ``gemm`` and ``elementwise``.  Only fused attention kernels land in ``attention``.

The ranges ``ssmbench.models.common.pick_backend`` opens around each operator and each
decode step are named by the registry (``ssmbench::ssm_scan::ssd_step``: the family's
scope, then the op; ``ssmbench.registry.PROFILER_RANGES``) and bucketed by that scope.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence

from ssmbench.registry import SCOPES, range_scope

BUCKETS = ("gemm", "attention", "ssm_scan", "convolution", "normalization", "elementwise", "other")
# SCOPES (the registry's family scopes): composite kinds, containing GEMMs and elementwise ops
TOP_KERNELS = 3  # names listed per bucket
NAME_CHARS = 120  # demangled CUDA names run to kilobytes of template arguments

_NORM = r"(layer|rms|group|batch|instance)_?norm|l2_?norm|vector_norm|rowwisemoments"
_CONV = r"conv(\d|_|olution|olve)"  # conv1d, _convolution, causal_conv1d_fwd; not "convert"

# CPU operators, matched (re.fullmatch) against the op name without "aten::", leading and
# trailing underscores, and a _backward/_forward/_out suffix: "aten::copy_" -> "copy".
_ATEN_RULES: tuple[tuple[str, str], ...] = (
    (
        "attention",
        r".*(scaled_dot_product|flash_attention|efficient_attention|cudnn_attention"
        r"|multi_head_attention|fused_sdp).*",
    ),
    ("convolution", rf".*{_CONV}.*"),
    ("normalization", rf".*({_NORM}).*|norm"),
    (
        # dense contractions, and the triangular solve (BLAS-3 trsm) of chunked DeltaNet
        "gemm",
        r"mm|bmm|addmm|addbmm|baddbmm|addmm_activation|mv|addmv|dot|vdot|matmul|linear"
        r"|einsum|tensordot|bilinear|outer|ger|addr|scaled_mm|int_mm|mkldnn_linear"
        r"|linalg_solve_triangular|triangular_solve",
    ),
    (
        # pointwise maps, reductions and scans along an axis, copies, fills and indexing:
        # the memory-bound arithmetic around the contractions
        "elementwise",
        r"add|sub|rsub|mul|div|true_divide|floor_divide|neg|abs|exp|exp2|expm1|log|log1p"
        r"|log2|log10|sqrt|rsqrt|pow|square|reciprocal|sin|cos|tan|tanh|sigmoid|silu|gelu"
        r"|relu|relu6|elu|selu|leaky_relu|hardtanh|hardswish|hardsigmoid|mish|softplus"
        r"|log_sigmoid|glu|threshold|clamp|clamp_min|clamp_max|clip|maximum|minimum|where"
        r"|masked_fill|masked_scatter|lerp|addcmul|addcdiv|sign|sgn|floor|ceil|round|trunc"
        r"|eq|ne|lt|le|gt|ge|logical_\w+|bitwise_\w+|isnan|isinf|isfinite|nan_to_num|erf"
        r"|erfc|atan2|fmod|remainder|polar|complex|conj_physical|angle"
        r"|sum|nansum|mean|amax|amin|aminmax|max|min|prod|cumsum|cumprod|cummax|cummin"
        r"|logcumsumexp|logsumexp|softmax|log_softmax|var|std|var_mean|std_mean|argmax"
        r"|argmin|any|all|copy|clone|to_copy|to|contiguous|cat|stack|index|index_select"
        r"|index_put|index_add|index_copy|index_fill|gather|scatter|scatter_add"
        r"|scatter_reduce|take|masked_select|tril|triu|flip|roll|repeat|repeat_interleave"
        r"|tile|constant_pad_nd|pad|fill|zero|zeros|zeros_like|ones|ones_like|full"
        r"|full_like|new_zeros|new_ones|new_full|arange|embedding|one_hot|slice_scatter"
        r"|select_scatter|diag_embed|dropout|native_dropout|fused_dropout|sort|topk",
    ),
)

# Everything else, searched (re.search) in the lower-cased name.  Order matters: a
# FlashAttention-3 kernel is a ``cutlass::device_kernel<flash::...>``, a cuDNN convolution an
# ``sm90_xmma_fprop_implicit_gemm``, and Triton scan kernels call ``tl.dot``.
_KERNEL_RULES: tuple[tuple[str, str], ...] = (
    (
        # mamba_ssm: selective_scan_fwd_kernel (CUDA), _selective_scan_update_kernel,
        # _chunk_cumsum/_chunk_state/_state_passing/_bmm_chunk/_chunk_scan_fwd_kernel (SSD),
        # mamba3_siso_fwd_kernel, dacs_segsum_kernel, angle_dt_fwd_kernel.
        # flash-linear-attention: chunk_scaled_dot_kkt_fwd_kernel, solve_tril_16x16_kernel,
        # merge_16x16_to_64x64_inverse_kernel, recompute_w_u_fwd_kernel,
        # chunk_gated_delta_rule_fwd_kernel_h_blockdim64, chunk_fwd_kernel_o,
        # fused_recurrent_delta_rule_fwd_kernel, chunk_local_cumsum_scalar_kernel.
        "ssm_scan",
        r"selective_scan|selective_state_update|(?<![a-z0-9])ssd|(?<![a-z])chunk_(?!cat)"
        r"|state_passing|segsum|mamba3|angle_dt|dadt|dtrap|fused_recurrent|delta_rule"
        r"|gated_delta|delta_product|solve_tril|merge_16x16|recompute_w_u|wy_repr|wy_fast"
        r"|gdn_gate|simple_gla|linear_att|(?<![a-z0-9])s4d",
    ),
    (
        # pytorch_flash::flash_fwd_kernel, flash_fwd_splitkv_kernel, fmha_cutlassF_* (memory
        # efficient), cudnn ..._sdpa_..., aten::scaled_dot_product_attention as a scope name
        "attention",
        r"flash|fmha|sdpa|scaled_dot_product|attention|(?<![a-z])attn",
    ),
    # causal_conv1d_fwd_kernel, conv_depthwise2d_forward_kernel, cuDNN fprop/dgrad/wgrad
    ("convolution", rf"{_CONV}|fprop|dgrad|wgrad|depthwise"),
    # vectorized_layer_norm_kernel, RowwiseMomentsCUDAKernel, _layer_norm_fwd_1pass_kernel
    # (mamba_ssm rms/layer norm), layer_norm_gated_fwd_kernel and l2norm_fwd_kernel (fla)
    ("normalization", _NORM),
    (
        # cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_...>, sm90_xmma_gemm_*, ampere_sgemm,
        # nvjet_* (cuBLAS on Hopper), gemv2T_kernel_val, splitKreduce_kernel, cuBLAS trsm;
        # mkldnn::_linear_pointwise (CPU, compiled)
        "gemm",
        r"gemm|gemv|cutlass|cublas|xmma|nvjet|kernel2|splitkreduce|matmul|trsm"
        r"|linear_pointwise|mkl_linear",
    ),
    (
        # at::native::vectorized_elementwise_kernel, reduce_kernel, softmax_warp_forward,
        # cub::DeviceScanKernel, tensor_kernel_scan_innermost_dim (cumsum),
        # CatArrayBatchedCopy, direct_copy_kernel_cuda, index/scatter/gather kernels;
        # Triton pointwise kernels of mamba_ssm and fla (_swiglu_fwd_kernel, sigmoid, ...)
        "elementwise",
        r"elementwise|reduce_kernel|softmax|cub::|scan_innermost|scan_outer|catarray|cat_"
        r"|copy|fill|index|gather|scatter|sort|triu|tril|swiglu|silu|swish|sigmoid"
        r"|softplus|gelu|relu|dropout|rotary",
    ),
)

# torch.compile (Inductor) kernels are named after the ops they fuse:
# triton_poi_fused_add_mul_0, triton_red_fused_native_layer_norm_1, triton_tem_fused_mm_2,
# cpp_fused_... on CPU.  Fused pointwise/reduction kernels are elementwise unless they fuse a
# normalization (even triton_poi_fused_convolution_0, the bias add after an extern conv);
# templates are GEMMs or convolutions.
_INDUCTOR_FUSED = r"^(graph_\d+_)?(triton_(poi|red|per)|cpp)_fused"
_INDUCTOR_TEMPLATE = r"^triton_tem_"


def _aten_op(name: str) -> str:
    """``aten::_native_layer_norm_backward`` -> ``native_layer_norm``."""
    op = name.removeprefix("aten::").lower().strip("_")
    return re.sub(r"_(backward(_data|_input|_weight)?|forward|out)$", "", op)


@functools.lru_cache(maxsize=4096)  # a profile repeats a few hundred names
def bucket(kernel_name: str) -> str:
    """The bucket of one operator or kernel, from its name alone (see the module docstring);
    a range of ``ssmbench.registry.PROFILER_RANGES`` is its family's scope."""
    scope = range_scope(kernel_name)
    if scope is not None:
        return scope
    if kernel_name.startswith("aten::"):
        op = _aten_op(kernel_name)
        for kind, pattern in _ATEN_RULES:
            if re.fullmatch(pattern, op):
                return kind
        return "other"
    name = kernel_name.lower()
    if re.search(_INDUCTOR_FUSED, name):
        return "normalization" if re.search(_NORM, name) else "elementwise"
    if re.search(_INDUCTOR_TEMPLATE, name):
        return "convolution" if re.search(_CONV, name) else "gemm"
    for kind, pattern in _KERNEL_RULES:
        if re.search(pattern, name):
            return kind
    return "other"


def attribute(name: str, ancestors: Sequence[str] = ()) -> str:
    """The bucket one event's time goes to, given the names of the operators and annotations
    around it, innermost first: the innermost scope, else its own bucket, else the nearest
    classified ancestor's, else ``other``."""
    kinds = [bucket(n) for n in (name, *ancestors)]
    for kind in kinds:
        if kind in SCOPES:
            return kind
    for kind in kinds:
        if kind != "other":
            return kind
    return "other"


def _short(name: str) -> str:
    name = name.removeprefix("void ").replace(";", ",")
    return name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 3] + "..."


def bucket_times(
    events: Iterable[tuple[str, float] | tuple[str, float, Sequence[str]]], iters: int
) -> list[dict]:
    """Sum event times per bucket.

    Args:
        events: ``(name, time_us)`` or ``(name, time_us, ancestors)``, the ancestors'
            names innermost first (see :func:`attribute`); times in microseconds, summed
            over ``iters`` calls.
        iters: the number of calls the events cover.

    Returns:
        One row per bucket, in ``BUCKETS`` order, zeros included: ``bucket``, ``time_ms``
        (per call), ``share`` (of the total over all buckets; all 0.0 when nothing was
        timed), ``n_kernels`` (events per call, a mean) and ``top_kernels`` (up to
        ``TOP_KERNELS`` distinct names, most time first, ``;``-joined).
    """
    if iters < 1:
        raise ValueError(f"iters must be at least 1, got {iters}")
    time_us = dict.fromkeys(BUCKETS, 0.0)
    count = dict.fromkeys(BUCKETS, 0)
    per_name: dict[str, dict[str, float]] = {b: {} for b in BUCKETS}
    for event in events:
        name, us = event[0], float(event[1])
        kind = attribute(name, event[2] if len(event) > 2 else ())
        time_us[kind] += us
        count[kind] += 1
        per_name[kind][name] = per_name[kind].get(name, 0.0) + us
    total_us = sum(time_us.values())
    rows = []
    for kind in BUCKETS:
        top = sorted(per_name[kind].items(), key=lambda item: -item[1])[:TOP_KERNELS]
        rows.append(
            {
                "bucket": kind,
                "time_ms": time_us[kind] / iters / 1e3,
                "share": time_us[kind] / total_us if total_us > 0 else 0.0,
                "n_kernels": count[kind] / iters,
                "top_kernels": ";".join(_short(n) for n, _ in top),
            }
        )
    return rows


def _ancestors(event) -> tuple[str, ...]:
    names = []
    parent = event.cpu_parent
    while parent is not None:
        names.append(parent.name)
        parent = parent.cpu_parent
    return tuple(names)


def cpu_events(function_events: Iterable) -> list[tuple[str, float, tuple[str, ...]]]:
    """``(name, self CPU time in us, ancestors)`` of every CPU operator in a profile's
    ``events()``; annotations are left out as events but stay in the ancestors."""
    from torch.autograd import DeviceType

    return [
        (e.name, e.self_cpu_time_total, _ancestors(e))
        for e in function_events
        if e.device_type == DeviceType.CPU and not e.is_async and not e.is_user_annotation
    ]


def _linked(event) -> int:
    """The correlation id of the operator that launched a device event (0: none)."""
    return getattr(event, "linked_correlation_id", 0) or 0


def device_events(function_events: Iterable) -> list[tuple[str, float, tuple[str, ...]]]:
    """``(name, device time in us, ancestors)`` of every kernel, memcpy and memset on the
    device timeline; the ancestors are the launching operator and its enclosing ones."""
    from torch.autograd import DeviceType

    events = list(function_events)
    # frontend operators and annotations carry the correlation id their kernels link to
    launchers = {
        e.id: e
        for e in events
        if e.device_type == DeviceType.CPU and not e.is_async and _linked(e) == 0
    }
    rows = []
    for e in events:
        if e.device_type == DeviceType.CPU or e.is_user_annotation:
            continue
        if "annotation" in (getattr(e, "activity_type", None) or ""):  # gpu_user_annotation
            continue
        op = launchers.get(_linked(e)) if _linked(e) > 0 else None
        ancestors = () if op is None else (op.name, *_ancestors(op))
        rows.append((e.name, e.time_range.elapsed_us(), ancestors))
    return rows


def profile_ops(
    fn: Callable[[], object],
    device: str,
    warmup: int = 1,
    iters: int = 3,
    trace_path: str | None = None,
) -> list[dict]:
    """Profile ``fn`` and sum its device-side time per bucket.

    Returns the rows of :func:`bucket_times` (``time_ms`` per call), each with
    ``time_basis``: ``"cuda_device"`` (kernel time on the GPU) or ``"cpu_self"`` (self CPU
    time of operators).  With ``trace_path`` (``.json`` or ``.json.gz``) the Chrome trace of
    the profiled calls is written there, for Perfetto or chrome://tracing.
    """
    import torch

    if trace_path is not None and not trace_path.endswith((".json", ".json.gz")):
        raise ValueError(f"trace_path must end with .json or .json.gz, got {trace_path!r}")
    cuda = device == "cuda"
    if cuda:
        from torch.profiler import ProfilerActivity, profile

        profiler = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    else:
        # torch.autograd.profiler's profile, which torch.profiler.profile wraps: entering the
        # wrapper imports Inductor and Dynamo (about 2 s a process on the 2-core VM)
        from torch.autograd.profiler import profile

        profiler = profile(use_cpu=True, use_kineto=True)
    for _ in range(warmup):
        fn()
    if cuda:
        torch.cuda.synchronize()
    with profiler as prof:
        for _ in range(iters):
            fn()
        if cuda:
            torch.cuda.synchronize()  # every kernel ends inside the profiled window
    events = prof.events() if cuda else prof.function_events
    rows = bucket_times(device_events(events) if cuda else cpu_events(events), iters)
    if trace_path is not None:
        export_trace(prof, trace_path)
    basis = "cuda_device" if cuda else "cpu_self"
    return [{**row, "time_basis": basis} for row in rows]


def write_empty_trace(trace_path: str) -> None:
    """Write a valid Chrome trace with no events (``{"traceEvents": []}``) to
    ``trace_path``, gzipped for a ``.gz`` path: the trace of a cell that could not be
    profiled, so the job's outputs exist and a trace viewer opens it."""
    os.makedirs(os.path.dirname(os.path.abspath(trace_path)), exist_ok=True)
    data = json.dumps({"traceEvents": []}).encode()
    tmp = f"{trace_path}.tmp"
    opener = gzip.open if trace_path.endswith(".gz") else open
    with opener(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, trace_path)


def export_trace(prof, trace_path: str) -> None:
    """Write the profile's Chrome trace to ``trace_path``; a ``.gz`` path is gzipped (written
    to a temporary ``.json`` beside it first, which is removed)."""
    folder = os.path.dirname(os.path.abspath(trace_path))
    os.makedirs(folder, exist_ok=True)
    if not trace_path.endswith(".gz"):
        prof.export_chrome_trace(trace_path)
        return
    fd, tmp = tempfile.mkstemp(suffix=".json", dir=folder)
    os.close(fd)
    try:
        prof.export_chrome_trace(tmp)
        with open(tmp, "rb") as src, gzip.open(trace_path, "wb") as dst:
            shutil.copyfileobj(src, dst)
    finally:
        os.remove(tmp)
