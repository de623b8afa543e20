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
from ssmbench.models import attention, deltanet, mamba, mamba2, mamba3, s4d
from ssmbench.models.common import RandomDraws
from ssmbench.registry import OPERATOR_FAMILIES as FAMILIES
from ssmbench.scripting import positive_int
from ssmbench.stats import ratio_interval

# Mamba-2/3's step sizes and DeltaNet's per-token log-decays, as the blocks' init makes
# them (dt in [0.001, 0.1]), not the verify draws' steep ones: a chunk that forgets within
# itself takes an exact path, which would change the work timed
STEP_RANGE = (0.01, 0.1)
LOG_DECAY_RANGE = (0.01, 0.1)


def op_inputs(family: str, t: int, size, d_state: int, gen: torch.Generator):
    """(function of backend, analytic FLOPs) for one family's operator at length t, on the
    family's ``random_inputs`` from ``gen`` (steps inside the blocks' init range: the
    decays' steepness is the one property of the values that changes the work)."""
    draws = RandomDraws(gen)
    b, D, E = 1, size.d_model, size.d_inner
    if family == "attention":
        h, d = size.n_heads, size.head_dim
        qkv = attention.random_inputs(draws, b, t, h, d)
        flop = counts.attention_op_flop(b, t, h, d)
        return (lambda be: ops.attention(**qkv, backend=be)), flop
    if family == "mamba":
        kw = mamba.random_inputs(draws, b, t, E, d_state)
        del kw["initial_state"]
        flop = counts.selective_scan_op_flop(b, t, E, d_state)
        return (
            lambda be: ops.selective_scan(
                **kw, delta_softplus=True, chunk_size=size.chunk, backend=be
            )
        ), flop
    if family == "mamba2":
        p = size.head_dim
        h = E // p
        drawn = mamba2.random_inputs(draws, b, t, h, p, 1, d_state, dt_range=STEP_RANGE)
        x, dt, A, B, C = (drawn[name] for name in ("x", "dt", "A", "B", "C"))
        flop = counts.ssd_op_flop(b, t, h, p, d_state, 1, size.chunk)
        return (lambda be: ops.ssd(x, dt, A, B, C, chunk_size=size.chunk, backend=be)), flop
    if family == "mamba3":
        p = size.head_dim
        h = E // p
        r = d_state // 2  # every state pair rotated
        drawn = mamba3.random_inputs(draws, b, t, h, 1, p, d_state, r, dt_range=STEP_RANGE)
        args = tuple(drawn[name] for name in ("x", "dt", "A", "B", "C", "theta", "lam"))
        flop = counts.mamba3_op_flop(b, t, h, p, d_state, 1, size.chunk)
        return (lambda be: ops.mamba3(*args, chunk_size=size.chunk, backend=be)), flop
    if family == "deltanet":
        h, d = size.n_heads, size.head_dim
        kw = deltanet.random_inputs(draws, b, t, h, d, d, log_decay_range=LOG_DECAY_RANGE)
        del kw["initial_state"]
        flop = counts.delta_rule_op_flop(b, t, h, d, d, size.chunk)
        return (lambda be: ops.delta_rule(**kw, chunk_size=size.chunk, backend=be)), flop
    if family == "s4d":
        n = d_state // 2
        kw = s4d.random_inputs(draws, b, t, D, n)
        del kw["initial_state"]
        flop = counts.s4d_op_flop(b, t, D, n)
        return (lambda be: ops.s4d(**kw, backend=be)), flop
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
