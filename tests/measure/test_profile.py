"""Operator profile: the bucket rules on real operator and kernel names, attribution through
scopes and ancestors, the per-bucket arithmetic, and a real CPU profile with its trace."""

from __future__ import annotations

import gzip
import json
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch.autograd import DeviceType

from ssmbench.measure.profile import (
    BUCKETS,
    attribute,
    bucket,
    bucket_times,
    device_events,
    profile_ops,
)

# (name, bucket): CPU operators as torch.profiler names them, and CUDA/Triton kernel names as
# they appear in traces (Triton names from state-spaces/mamba and fla-org/flash-linear-attention)
NAMES = [
    ("aten::mm", "gemm"),
    ("aten::bmm", "gemm"),
    ("aten::addmm", "gemm"),
    ("aten::baddbmm", "gemm"),
    ("aten::matmul", "gemm"),
    ("aten::linear", "gemm"),
    ("aten::einsum", "gemm"),
    ("aten::linalg_solve_triangular", "gemm"),
    ("aten::scaled_dot_product_attention", "attention"),
    ("aten::_scaled_dot_product_flash_attention", "attention"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
    ("aten::_efficient_attention_forward", "attention"),
    ("aten::conv1d", "convolution"),
    ("aten::convolution", "convolution"),
    ("aten::_convolution", "convolution"),
    ("aten::mkldnn_convolution", "convolution"),
    ("aten::convolution_backward", "convolution"),
    ("aten::layer_norm", "normalization"),
    ("aten::native_layer_norm", "normalization"),
    ("aten::rms_norm", "normalization"),
    ("aten::linalg_vector_norm", "normalization"),
    ("aten::mul", "elementwise"),
    ("aten::add_", "elementwise"),
    ("aten::exp", "elementwise"),
    ("aten::silu", "elementwise"),
    ("aten::silu_backward", "elementwise"),
    ("aten::softplus", "elementwise"),
    ("aten::cumsum", "elementwise"),
    ("aten::_softmax", "elementwise"),
    ("aten::copy_", "elementwise"),
    ("aten::cat", "elementwise"),
    ("aten::view", "other"),
    ("aten::empty", "other"),
    ("aten::chunk", "other"),
    ("aten::normal_", "other"),
    ("aten::_convert_indices_from_coo_to_csr", "other"),
    (
        "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>"
        "(cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4::Params)",
        "gemm",
    ),
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_cublas", "gemm"),
    ("nvjet_tst_128x256_64x4_2x1_v_bz_coopB_TNT", "gemm"),
    ("ampere_sgemm_128x64_tn", "gemm"),
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4>", "gemm"),
    ("triton_tem_fused_mm_2", "gemm"),
    (
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, "
        "false, cutlass::bfloat16_t> >(pytorch_flash::Flash_fwd_params)",
        "attention",
    ),
    (
        "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel"
        "<float, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",
        "attention",
    ),
    (
        "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90>>",
        "attention",
    ),
    (
        "void selective_scan_fwd_kernel<Selective_Scan_fwd_kernel_traits<32, 4, true, true, "
        "true, true, false, c10::BFloat16, float, float> >(SSMParamsBase)",
        "ssm_scan",
    ),
    ("_selective_scan_update_kernel", "ssm_scan"),
    ("_chunk_cumsum_fwd_kernel", "ssm_scan"),
    ("_chunk_state_fwd_kernel", "ssm_scan"),
    ("_state_passing_fwd_kernel", "ssm_scan"),
    ("_bmm_chunk_fwd_kernel", "ssm_scan"),
    ("_chunk_scan_fwd_kernel", "ssm_scan"),
    ("mamba3_siso_fwd_kernel", "ssm_scan"),
    ("chunk_scaled_dot_kkt_fwd_kernel", "ssm_scan"),
    ("solve_tril_16x16_kernel", "ssm_scan"),
    ("merge_16x16_to_64x64_inverse_kernel", "ssm_scan"),
    ("recompute_w_u_fwd_kernel", "ssm_scan"),
    ("chunk_gated_delta_rule_fwd_kernel_h_blockdim64", "ssm_scan"),
    ("chunk_fwd_kernel_o", "ssm_scan"),
    ("chunk_local_cumsum_scalar_kernel", "ssm_scan"),
    ("fused_recurrent_delta_rule_fwd_kernel", "ssm_scan"),
    ("ssmbench::ssd", "ssm_scan"),
    ("ssmbench::s4d", "ssm_scan"),
    (
        "void causal_conv1d_fwd_kernel<Causal_conv1d_fwd_kernel_traits<128, 4, true, "
        "c10::BFloat16> >(ConvParamsBase)",
        "convolution",
    ),
    (
        "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32",
        "convolution",
    ),
    (
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>",
        "normalization",
    ),
    ("_layer_norm_fwd_1pass_kernel", "normalization"),
    ("layer_norm_gated_fwd_kernel", "normalization"),
    ("l2norm_fwd_kernel1", "normalization"),
    ("triton_red_fused_native_layer_norm_1", "normalization"),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
        "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)",
        "elementwise",
    ),
    ("void at::native::tensor_kernel_scan_innermost_dim<float, std::plus<float> >", "elementwise"),
    ("void at::native::(anonymous namespace)::chunk_cat_cuda_kernel<float>", "elementwise"),
    ("triton_poi_fused_add_mul_0", "elementwise"),
    ("triton_poi_fused_convolution_0", "elementwise"),  # the bias add after an extern conv
    ("_swiglu_fwd_kernel", "elementwise"),
    ("Memcpy DtoD (Device -> Device)", "other"),
    ("cudaLaunchKernel", "other"),
]


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("name, expected", NAMES, ids=[n[:48] for n, _ in NAMES])
def test_bucket(name, expected):
    assert bucket(name) == expected


def test_attribute_scopes_then_own_then_ancestors():
    scan = "ssmbench::selective_scan"
    assert attribute("aten::bmm", ("aten::einsum", scan)) == "ssm_scan"  # the scope wins
    assert attribute("aten::bmm", ("aten::einsum", scan, "attention")) == "ssm_scan"  # innermost
    assert attribute("aten::copy_", ("aten::addmm",)) == "elementwise"  # its own bucket
    assert attribute("aten::view", ("aten::linear",)) == "gemm"  # nearest classified ancestor
    assert attribute("aten::empty", ("my_block", "aten::conv1d")) == "convolution"
    assert attribute("aten::empty") == "other"
    assert attribute("aten::empty", ("my_block",)) == "other"


def test_bucket_times_arithmetic():
    events = [
        ("aten::mm", 300.0),
        ("aten::mm", 100.0),
        ("aten::add", 100.0),
        ("aten::view", 50.0, ("aten::linear",)),  # views inside a linear are GEMM time
        ("aten::empty", 50.0),
        ("aten::bmm", 400.0, ("aten::einsum", "ssmbench::ssd")),
    ]
    rows = {r["bucket"]: r for r in bucket_times(events, iters=2)}
    assert list(rows) == list(BUCKETS)
    assert rows["gemm"]["time_ms"] == pytest.approx(450 / 2 / 1e3)
    assert rows["gemm"]["share"] == pytest.approx(450 / 1000)
    assert rows["gemm"]["n_kernels"] == 1.5
    assert rows["gemm"]["top_kernels"] == "aten::mm;aten::view"
    assert rows["ssm_scan"]["time_ms"] == pytest.approx(0.2)
    assert rows["elementwise"]["share"] == pytest.approx(0.1)
    assert rows["other"]["top_kernels"] == "aten::empty"
    assert rows["attention"] == {
        "bucket": "attention",
        "time_ms": 0.0,
        "share": 0.0,
        "n_kernels": 0.0,
        "top_kernels": "",
    }
    assert sum(r["share"] for r in rows.values()) == pytest.approx(1.0)


def test_bucket_times_edge_cases():
    assert all(r["share"] == 0.0 for r in bucket_times([], iters=1))
    long_name = "void " + "k" * 500 + "<a;b>"
    (top,) = [r["top_kernels"] for r in bucket_times([(long_name, 1.0)], 1) if r["share"]]
    assert len(top) == 120 and ";" not in top and not top.startswith("void")
    with pytest.raises(ValueError, match="iters"):
        bucket_times([("aten::mm", 1.0)], iters=0)


def _event(name, device_type, id=0, linked=0, us=0.0, parent=None, activity="kernel"):
    """A stand-in for torch's FunctionEvent with the fields device_events reads."""
    return SimpleNamespace(
        name=name,
        device_type=device_type,
        id=id,
        linked_correlation_id=linked,
        is_async=False,
        is_user_annotation=activity == "user_annotation",
        activity_type=activity,
        cpu_parent=parent,
        time_range=SimpleNamespace(elapsed_us=lambda: us),
    )


def test_device_events_use_device_time_and_the_launching_op():
    cpu, cuda = DeviceType.CPU, DeviceType.CUDA
    scope = _event("ssmbench::ssd", cpu, id=1, us=900.0, activity="user_annotation")
    bmm = _event("aten::bmm", cpu, id=2, us=500.0, parent=scope, activity="cpu_op")
    addmm = _event("aten::addmm", cpu, id=3, us=500.0, activity="cpu_op")
    events = [
        scope,
        bmm,
        addmm,
        _event("cudaLaunchKernel", cpu, id=77, linked=2, us=5.0, activity="cuda_runtime"),
        _event("ampere_sgemm_64x64_nn", cuda, id=77, linked=2, us=40.0),
        _event("ampere_sgemm_64x64_nn", cuda, id=78, linked=3, us=30.0),
        _event(
            "Memcpy DtoD (Device -> Device)", cuda, id=79, linked=3, us=2.0, activity="gpu_memcpy"
        ),
        _event("ssmbench::ssd", cuda, id=80, us=60.0, activity="gpu_user_annotation"),
        _event("orphan_kernel", cuda, id=81, us=1.0),
    ]
    rows = device_events(events)
    assert [(name, us) for name, us, _ in rows] == [
        ("ampere_sgemm_64x64_nn", 40.0),
        ("ampere_sgemm_64x64_nn", 30.0),
        ("Memcpy DtoD (Device -> Device)", 2.0),
        ("orphan_kernel", 1.0),
    ]
    assert rows[0][2] == ("aten::bmm", "ssmbench::ssd")
    times = {r["bucket"]: r["time_ms"] * 1e3 for r in bucket_times(rows, 1)}
    assert times["ssm_scan"] == pytest.approx(40.0)  # launched inside the scan scope
    assert times["gemm"] == pytest.approx(32.0)  # the memcpy belongs to its addmm
    assert times["other"] == pytest.approx(1.0)


class Block(torch.nn.Module):
    """A Linear, a depthwise causal conv1d, a layer norm and elementwise ops."""

    def __init__(self, d: int = 16, width: int = 4):
        super().__init__()
        self.proj = torch.nn.Linear(d, d)
        self.conv = torch.nn.Conv1d(d, d, width, groups=d, padding=width - 1)
        self.norm = torch.nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (b, t, d)
        t = x.shape[1]
        h = self.proj(x)  # (b t d)
        h = self.conv(h.transpose(1, 2))[..., :t].transpose(1, 2)  # (b t d)
        return F.silu(self.norm(h)) * x  # (b t d)


def test_cpu_profile_of_a_small_block(tmp_path):
    block, x = Block(), torch.randn(2, 24, 16)

    @torch.no_grad()
    def fn():
        with torch.profiler.record_function("ssmbench::selective_scan"):
            torch.cumsum(x, dim=1)  # a "scan" written with PyTorch ops
        return block(x)

    trace = tmp_path / "prof" / "trace.json.gz"
    rows = profile_ops(fn, "cpu", warmup=1, iters=2, trace_path=str(trace))
    by_bucket = {r["bucket"]: r for r in rows}
    assert list(by_bucket) == list(BUCKETS)
    for kind in ("gemm", "convolution", "normalization", "elementwise", "ssm_scan"):
        assert by_bucket[kind]["time_ms"] > 0, kind
    assert by_bucket["attention"]["time_ms"] == 0
    assert "aten::cumsum" in by_bucket["ssm_scan"]["top_kernels"]
    assert "aten::addmm" in by_bucket["gemm"]["top_kernels"]
    assert {r["time_basis"] for r in rows} == {"cpu_self"}
    assert sum(r["share"] for r in rows) == pytest.approx(1.0)

    with gzip.open(trace, "rt") as f:
        assert "traceEvents" in json.load(f)
    assert [p.name for p in trace.parent.iterdir()] == ["trace.json.gz"]  # no temp file left


def test_profile_rejects_unknown_trace_suffix(tmp_path):
    with pytest.raises(ValueError, match="json.gz"):
        profile_ops(lambda: None, "cpu", trace_path=str(tmp_path / "trace.txt"))


def test_profiled_decode_step_of_mamba2_is_ssm_scan():
    """A decode step runs its family's operator step inside the registry's range, so the
    scan's einsums and pointwise ops count as ``ssm_scan``, not as GEMM and elementwise."""
    from ssmbench.matrix import Size
    from ssmbench.models import build_model

    size = Size(d_model=16, n_layers=1, n_heads=2, head_dim=8, expand=2, d_conv=4, chunk=8)
    model = build_model("mamba2", size, d_state=8, backend="torch")
    x = torch.randn(1, 5, size.d_model)
    with torch.no_grad():
        _, caches = model(x)

    @torch.no_grad()
    def step():
        return model.step(x[:, -1], caches)

    by_bucket = {r["bucket"]: r for r in profile_ops(step, "cpu", warmup=1, iters=2)}
    assert by_bucket["ssm_scan"]["time_ms"] > 0
    assert by_bucket["gemm"]["time_ms"] > 0  # the projections stay outside the scope


@pytest.mark.parametrize(
    "name", ["ssmbench::ssm_scan::ssd_step", "ssmbench::attention::attention_step"]
)
def test_registry_ranges_bucket_by_their_scope(name):
    assert bucket(name) == name.split("::")[1]
