"""How much faster the vectorized `torch` backend is than the `naive` loop, per family,
and how much of the machine's matmul rate each `torch` operator reaches; one run.

    python scripts/bench_ratios.py [--seq-len 4096] [--samples 5] [--threads 2]

Operators at T = --seq-len, batch 1, fp32, with the shapes of the `cpu` preset's block
(d_model 256, expand 2, 4 heads x 64 for attention and the delta rule, 8 SSM heads of 64
for Mamba-2/3, d_inner 512 for Mamba-1, 256 channels for S4D, d_state 16).  All in this
one process, in rounds that interleave the backends, so the ratios compare like with
like on a shared, noisy machine; freed memory stays in the process (``--host-allocator
retain``, as in the presets), so no sample pays page faults that another did not.

Each round calls each backend twice in a row and times both calls.  The second, *warm*
call is the one the ratios use: a cell of the workflow times back-to-back calls after
its warm-up, so its operator finds its buffers and weights in cache as that call does.
The first, *cold* call follows the other backends' calls (a naive loop of 10^2 ms, a
2048^3 GEMM), which have evicted the caches; its medians are printed as well, since a
fast operator can lose a fifth of its speed-up to that.  The matmul rate is the warm
2048^3 fp32 GEMM of the same rounds.

Prints one line per family (the speed-up with its 95% interval: a bootstrap over the
rounds, paired, since each round times both backends), then one line per
``--ssd-chunks`` size (the chunked SSD's matmul share at that chunk size: the chunk
trades quadratic work inside chunks against work between them), then
`min_speedup=<x>` (warm).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import torch

from ssmbench import counts, ops
from ssmbench.config import load, plan
from ssmbench.measure.allocator import POLICIES, set_host_allocator
from ssmbench.registry import OPERATOR_FAMILIES as FAMILIES
from ssmbench.scripting import positive_int
from ssmbench.stats import ratio_interval


def op_inputs(family: str, t: int, size, d_state: int, gen: torch.Generator):
    """(function of backend, analytic FLOPs) for one family's operator at length t."""

    def randn(*shape, scale=1.0):
        return torch.randn(*shape, generator=gen) * scale

    def rand(*shape, low, high):
        return low + (high - low) * torch.rand(*shape, generator=gen)

    b, D, E = 1, size.d_model, size.d_inner
    if family == "attention":
        h, d = size.n_heads, size.head_dim
        q, k, v = (randn(b, t, h, d) for _ in range(3))
        flop = counts.attention_op_flop(b, t, h, d)
        return (lambda be: ops.attention(q, k, v, backend=be)), flop
    if family == "mamba":
        u, delta, z = randn(b, t, E), randn(b, t, E, scale=0.5), randn(b, t, E)
        A = -rand(E, d_state, low=0.5, high=2.0)
        B, C = randn(b, t, d_state), randn(b, t, d_state)
        Dskip, bias = randn(E), randn(E, scale=0.5)
        kw = dict(D=Dskip, z=z, delta_bias=bias, delta_softplus=True, chunk_size=size.chunk)
        flop = counts.selective_scan_op_flop(b, t, E, d_state)
        return (lambda be: ops.selective_scan(u, delta, A, B, C, **kw, backend=be)), flop
    if family in ("mamba2", "mamba3"):
        p = size.head_dim
        h = E // p
        x, dt = randn(b, t, h, p), rand(b, t, h, low=0.01, high=0.1)
        A = -rand(h, low=0.5, high=2.0)
        B, C = randn(b, t, 1, d_state), randn(b, t, 1, d_state)
        if family == "mamba2":
            flop = counts.ssd_op_flop(b, t, h, p, d_state, 1, size.chunk)
            return (lambda be: ops.ssd(x, dt, A, B, C, chunk_size=size.chunk, backend=be)), flop
        theta = rand(b, t, h, d_state // 2, low=-1.0, high=1.0)
        lam = rand(b, t, h, low=0.0, high=1.0)
        flop = counts.mamba3_op_flop(b, t, h, p, d_state, 1, size.chunk)
        return (
            lambda be: ops.mamba3(x, dt, A, B, C, theta, lam, chunk_size=size.chunk, backend=be)
        ), flop
    if family == "deltanet":
        h, d = size.n_heads, size.head_dim
        q = torch.nn.functional.normalize(randn(b, t, h, d), dim=-1)
        k = torch.nn.functional.normalize(randn(b, t, h, d), dim=-1)
        v, beta = randn(b, t, h, d), rand(b, t, h, low=0.1, high=0.9)
        g = -rand(b, t, h, low=0.01, high=0.1)
        flop = counts.delta_rule_op_flop(b, t, h, d, d, size.chunk)
        return (
            lambda be: ops.delta_rule(q, k, v, beta, g=g, chunk_size=size.chunk, backend=be)
        ), flop
    if family == "s4d":
        n = d_state // 2
        u = randn(b, t, D)
        log_dt = rand(D, low=-6.9, high=-2.3)
        A = torch.complex(-0.5 * torch.ones(D, n), torch.pi * torch.arange(n).repeat(D, 1))
        C = torch.complex(randn(D, n), randn(D, n))
        Dskip = randn(D)
        flop = counts.s4d_op_flop(b, t, D, n)
        return (lambda be: ops.s4d(u, log_dt, A, C, Dskip, backend=be)), flop
    raise ValueError(family)


def time_once_ms(run, backend: str) -> float:
    start = time.perf_counter()
    run(backend)
    return (time.perf_counter() - start) * 1e3


def time_round(run, backend: str, times: dict, cold: dict) -> None:
    """Two calls of ``backend`` in a row: the first's ms goes to ``cold``, the second's
    to ``times`` (see the module docstring)."""
    cold[backend].append(time_once_ms(run, backend))
    times[backend].append(time_once_ms(run, backend))


def matmul_inputs(n: int = 2048) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return torch.randn(n, n, generator=gen), torch.randn(n, n, generator=gen)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq-len", type=positive_int, default=4096)
    parser.add_argument("--samples", type=positive_int, default=5, help="rounds per family")
    parser.add_argument("--threads", type=positive_int, default=2)
    parser.add_argument("--families", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    parser.add_argument("--chunk", type=positive_int, help="chunk size (default: the cpu preset's)")
    parser.add_argument(
        "--compile", action="store_true", help="also time torch.compile of torch (slow to build)"
    )
    parser.add_argument(
        "--host-allocator",
        choices=POLICIES,
        default="retain",
        help="malloc policy, as the presets' timing.host_allocator (ssmbench.measure.allocator)",
    )
    parser.add_argument(
        "--ssd-chunks",
        type=positive_int,
        nargs="*",
        default=[128],
        help="also time the chunked SSD (mamba2 torch) at these chunk sizes, for its matmul share",
    )
    args = parser.parse_args()
    allocator = set_host_allocator(args.host_allocator)
    torch.set_num_threads(args.threads)
    cpu = plan(load(overrides={"preset": "cpu"}))
    size = cpu.size if args.chunk is None else dataclasses.replace(cpu.size, chunk=args.chunk)
    gen = torch.Generator().manual_seed(0)

    a, b = matmul_inputs()
    matmul_flop = 2 * a.shape[0] ** 3
    print(f"threads={args.threads} chunk={size.chunk} matmul=2048^3 fp32, timed beside each family")
    print(f"host allocator: {allocator}")
    speedups = []
    with torch.inference_mode():
        for family in args.families:
            run, flop = op_inputs(family, args.seq_len, size, 16, gen)
            backends = ("naive", "torch", "compile") if args.compile else ("naive", "torch")
            for be in (*backends, "matmul"):  # warm-up (and compilation)
                a @ b if be == "matmul" else run(be)
            times = {be: [] for be in (*backends, "matmul")}
            cold = {be: [] for be in (*backends, "matmul")}
            for _ in range(args.samples):  # interleaved: all see the same machine
                for be in backends:
                    time_round(run, be, times, cold)
                time_round(lambda _: a @ b, "matmul", times, cold)
            ms = {be: statistics.median(t) for be, t in times.items()}
            cold_ms = {be: statistics.median(t) for be, t in cold.items()}
            naive, fast = ms["naive"], ms["torch"]
            gflops = flop / fast / 1e6
            peak = matmul_flop / ms["matmul"] / 1e6
            speedups.append(naive / fast)
            # the rounds interleave the backends: a paired interval (ssmbench.stats)
            _, lo, hi = ratio_interval(times["naive"], times["torch"], paired=True)
            print(
                f"{family:10s} T={args.seq_len} naive_ms={naive:9.2f} torch_ms={fast:8.2f} "
                f"speedup={naive / fast:7.1f}x [95% CI {lo:.1f}-{hi:.1f}] "
                f"torch_gflops={gflops:6.1f} "
                f"matmul_gflops={peak:6.1f} of_matmul={gflops / peak:6.1%}"
                + (
                    f" compile_ms={ms['compile']:8.2f} "
                    f"compile_speedup={naive / ms['compile']:6.1f}x"
                    if args.compile
                    else ""
                )
                + f" | cold: naive_ms={cold_ms['naive']:9.2f} torch_ms={cold_ms['torch']:8.2f}"
                f" speedup={cold_ms['naive'] / cold_ms['torch']:6.1f}x"
            )
        # The chunk size trades quadratic work inside chunks against work between them: the
        # SSD's share of the matmul rate at other chunk sizes than the speed-up's
        for chunk in args.ssd_chunks:
            sized = dataclasses.replace(size, chunk=chunk)
            run, flop = op_inputs("mamba2", args.seq_len, sized, 16, gen)
            run("torch"), a @ b  # warm-up
            times = {"torch": [], "matmul": []}
            cold = {"torch": [], "matmul": []}
            for _ in range(args.samples):
                time_round(run, "torch", times, cold)
                time_round(lambda _: a @ b, "matmul", times, cold)
            fast, mm = (statistics.median(times[k]) for k in ("torch", "matmul"))
            gflops, peak = flop / fast / 1e6, matmul_flop / mm / 1e6
            print(
                f"{'ssd':10s} T={args.seq_len} chunk={chunk:<4d} torch_ms={fast:8.2f} "
                f"torch_gflops={gflops:6.1f} matmul_gflops={peak:6.1f} "
                f"of_matmul={gflops / peak:6.1%} "
                f"| cold: torch_ms={statistics.median(cold['torch']):8.2f}"
            )
    print(f"min_speedup={min(speedups):.1f}")


if __name__ == "__main__":
    main()
