"""Exact Triton stand-ins for the PTX approximations of mamba_ssm's Mamba-3 kernels, for the
Triton interpreter (tests/models/triton_cpu.py's ``exact_mamba3_helpers``).  Test-side only; import
after ``triton_cpu.install()``: a kernel is jitted for the interpreter when its module is
imported.  Triton needs ``triton.language`` among a jitted function's globals, hence a
module of its own."""

import triton
import triton.language as tl


@triton.jit
def cos_exact(x):
    return tl.cos(x)


@triton.jit
def sin_exact(x):
    return tl.sin(x)


@triton.jit
def tanh_exact(x):
    return 2.0 * tl.sigmoid(2.0 * x) - 1.0  # tanh(x), exactly


@triton.jit
def sech2_exact(x):
    tanh = 2.0 * tl.sigmoid(2.0 * x) - 1.0
    return 1.0 - tanh * tanh


# mamba_ssm.ops.triton.mamba3.utils' name -> its exact stand-in
MAMBA3_HELPERS = {
    "cos_approx": cos_exact,
    "sin_approx": sin_exact,
    "tanh_approx": tanh_exact,
    "sech2_approx": sech2_exact,
}
