"""Run mamba_ssm's and fla's Triton kernels on CPU tensors, under the Triton interpreter.

Test-side only.  :func:`install` must run in a fresh process before fla or mamba_ssm is
imported: ``TRITON_INTERPRET`` is read when ``@triton.jit`` decorates a kernel, i.e. when
the kernel's module is imported.  The stubs patch that process only; tests/models/test_fused.py
runs its kernel checks in a spawned worker that calls :func:`install` first.
"""

from __future__ import annotations

import ast
import contextlib
import os
import sys
import types


def install() -> None:
    """Turn the interpreter on and apply the stubs below (idempotent)."""
    os.environ["TRITON_INTERPRET"] = "1"
    import torch
    import triton.runtime.autotuner as autotuner
    import triton.runtime.interpreter as interpreter

    # 1. mamba_ssm's selective_state_update launches inside
    #    ``with torch.cuda.device(x.device.index)``; a CPU tensor's index is None, which
    #    torch.cuda.device rejects.  A None device becomes a no-op guard.
    cuda_device = torch.cuda.device
    if not getattr(cuda_device, "_cpu_stub", False):

        def device(index):
            return contextlib.nullcontext() if index is None else cuda_device(index)

        device._cpu_stub = True
        torch.cuda.device = device

    # 2. @triton.autotune times every config with the GPU driver's benchmarker, which the
    #    interpreter lacks (and CPU timings would mean nothing): every config "takes" 0 ms
    #    without running, so the first config is picked and the kernel runs once with it.
    autotuner.Autotuner._bench = lambda self, *args, config, **meta: 0.0

    # 3. Compiled Triton makes a for-loop's induction variable a Triton scalar (fla's
    #    kernels call ``i_t.to(tl.int64)`` on it); the interpreter leaves it a Python int.
    #    The interpreter already rewrites each kernel's AST (every assignment goes through
    #    ``interpreter_semantic.to_tensor``); this adds the same conversion of the loop
    #    variable at the top of each for-loop body.
    class LoopVariables(interpreter.ASTTransformer):
        def visit_For(self, node: ast.For) -> ast.For:
            self.generic_visit(node)
            if isinstance(node.target, ast.Name):
                name = node.target.id
                convert = ast.parse(f"{name} = interpreter_semantic.to_tensor({name}, False)")
                node.body.insert(0, ast.copy_location(convert.body[0], node))
            return node

    interpreter.FunctionRewriter.ast_transformer = LoopVariables()


def fill_new_buffers_with_nan() -> None:
    """torch.empty, torch.empty_like and Tensor.new_empty return floating tensors filled
    with NaN, so that a kernel that reads memory nobody wrote fails the comparison instead
    of passing on a lucky zero (flash-linear-attention's tests do the same)."""
    import torch

    if getattr(torch.empty, "_nan_filled", False):
        return

    def filled(allocate):
        def allocate_nan(*args, **kwargs):
            x = allocate(*args, **kwargs)
            if x.is_floating_point() or x.is_complex():
                x.fill_(float("nan"))
            return x

        allocate_nan._nan_filled = True
        return allocate_nan

    torch.empty = filled(torch.empty)
    torch.empty_like = filled(torch.empty_like)
    torch.Tensor.new_empty = filled(torch.Tensor.new_empty)


def stub_selective_scan_cuda() -> None:
    """An empty ``selective_scan_cuda`` module: mamba_ssm's selective_scan_interface
    imports that CUDA extension at the top, and the tests need only the pure-PyTorch
    ``selective_scan_ref`` next to it.  Calling the CUDA kernel would raise
    AttributeError."""
    sys.modules.setdefault("selective_scan_cuda", types.ModuleType("selective_scan_cuda"))


def exact_mamba3_helpers() -> None:
    """mamba_ssm's Mamba-3 kernels with exact math where they use PTX approximations.

    Its ``ops/triton/mamba3/utils.py`` computes cos, sin, tanh and sech^2 with
    ``tl.inline_asm_elementwise`` (``cos.approx.f32`` and the like), which the interpreter
    cannot run (NotImplementedError).  The kernel modules import those helpers by name,
    and the interpreter calls a kernel as Python with its module's globals, so each name
    is rebound, in every kernel module that has it, to the exact Triton function of
    tests/models/triton_exact.py.  Everything else in the kernels (the TMA descriptors included)
    runs as written.  Call after :func:`install` (the functions are jitted on import)."""
    from ssmbench.models import kernels
    from tests.models import triton_exact

    for name in ("utils", "angle_dt", "mamba3_siso_fwd", "mamba3_siso_bwd", "mamba3_siso_step"):
        module = kernels.mamba_ssm_module(f"ops.triton.mamba3.{name}")
        for helper, function in triton_exact.MAMBA3_HELPERS.items():
            if hasattr(module, helper):
                setattr(module, helper, function)
