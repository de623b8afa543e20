"""Our chunked gated delta rule (the deltanet family's ``torch`` backend) against the
pure-PyTorch form a user of transformers would otherwise run, on the same inputs, in rounds
that interleave them in one process.

    python scripts/bench_gated_delta.py [--seq-len 4096 1024] [--rounds 30] [--threads 2]
                                        [--processes 5] [--chunk 64]
                                        [--host-allocator retain] [--profile]

The two sides:

- ``ours``: :func:`ssmbench.models.deltanet.delta_rule_torch` (the WY / UT chunked form:
  every chunk's intra-chunk terms in batched matmuls and triangular solves, then a loop
  over chunks that only carries the state).
- ``transformers``: ``torch_chunk_gated_delta_rule`` of
  ``transformers.models.qwen3_next.modeling_qwen3_next``, the module's own function
  (``inspect.unwrap``: the name it exports is wrapped by a hub-kernel decorator that calls
  flash-linear-attention's Triton kernel instead wherever fla is installed).

Shapes: the ``cpu`` preset's delta-rule operator (config/config.yaml, presets.cpu.size:
batch 1, 4 heads, d_k = d_v = 64, chunk 64), fp32, at each ``--seq-len``.  Inputs are
:func:`ssmbench.models.deltanet.random_inputs` (unit q and k, beta in [0.05, 0.95], a
random initial state) with per-token log-decays in [-0.1, -0.01], the block's init range,
as scripts/bench_ratios.py draws them.

Conventions.  Both compute S_t = a_t (S_{t-1} - beta_t k_t k_t^T S_{t-1}) + beta_t k_t
v_t^T, o_t = S_t^T q_t with a_t = exp(g_t), in the same layouts (q, k, v ``(b, t, h, .)``;
g, beta ``(b, t, h)``; the state ``(b, h, k, v)``); transformers takes g before beta.  Both
scale q by d_k^-0.5 inside (ours as told by ``scale=``, as the block calls it), and
transformers' in-kernel L2 normalisation stays off (``use_qk_l2norm_in_kernel=False``),
since the keys and queries are unit vectors already.  Before timing, each T's outputs o and
final states of the two sides are compared under the fp32 tolerances
(:func:`ssmbench.numerics.compare`); a mismatch stops the script.

Each round calls each side twice in a row and times the second call (the first puts the
side's buffers in cache where the other side's call left its own), the order of the sides
alternating from round to round.  Per T it prints each side's median ms with its
interquartile range, transformers / ours with its 95% interval (a paired bootstrap over
the rounds, :func:`ssmbench.stats.ratio_interval`), and the load average before and after
(other jobs on the machine slow both sides, not always alike).  ``--profile`` adds
torch.profiler's top operators of one call of each side, by self CPU time.

One process's rounds know nothing of what differs between processes (the ratio moved by
up to 8% between processes at T = 4096 on the 2-core VM, more than one process's
interval), so ``--processes k`` (default 5) runs the rounds in k fresh processes, one after
another, prints each one's line, and then per T the ratio the project reports for a pair
measured in k processes: the median of the processes' ratios with the hierarchical 95%
interval (:func:`ssmbench.stats.replicated_ratio`) and the processes' max / min.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import _src  # noqa: F401  (puts ../src on sys.path)
import torch

from ssmbench.measure.allocator import POLICIES, set_host_allocator
from ssmbench.models import deltanet
from ssmbench.models.common import RandomDraws
from ssmbench.numerics import compare
from ssmbench.scripting import positive_int
from ssmbench.stats import between_spread, ratio_interval, ratio_of_medians, replicated_ratio

# the cpu preset's delta-rule operator (config/config.yaml, presets.cpu.size)
BATCH, HEADS, HEAD_DIM, CHUNK = 1, 4, 64, 64
LOG_DECAY_RANGE = (0.01, 0.1)  # minus the per-token log-decays, as scripts/bench_ratios.py
SIDES = ("ours", "transformers")


def transformers_form() -> Callable:
    """transformers' pure-PyTorch ``torch_chunk_gated_delta_rule`` (Qwen3-Next), unwrapped
    from the decorator that would hand the call to fla's kernel; TypeError when what
    unwrapping finds is not the function defined in that module."""
    from transformers.models.qwen3_next import modeling_qwen3_next

    form = inspect.unwrap(modeling_qwen3_next.torch_chunk_gated_delta_rule)
    if form.__code__.co_filename != modeling_qwen3_next.__file__:
        raise TypeError(
            f"torch_chunk_gated_delta_rule unwraps to {form.__code__.co_filename}, "
            f"not transformers' {modeling_qwen3_next.__file__}"
        )
    return form


def make_inputs(seq_len: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """The operator's arguments at ``seq_len`` (module docstring), fp32: q, k, v, beta,
    g, initial_state by name."""
    draws = RandomDraws(torch.Generator().manual_seed(seed))
    return deltanet.random_inputs(
        draws, BATCH, seq_len, HEADS, HEAD_DIM, HEAD_DIM, log_decay_range=LOG_DECAY_RANGE
    )


def sides(inputs: dict[str, torch.Tensor], chunk: int) -> dict[str, Callable]:
    """Each side as a call on ``inputs`` returning (o ``(b, t, h, v)``, final state
    ``(b, h, k, v)``), conventions mapped as the module docstring says."""
    q, k, v, beta, g, state = (
        inputs[name] for name in ("q", "k", "v", "beta", "g", "initial_state")
    )
    scale = q.shape[-1] ** -0.5  # transformers' query scaling, 1 / sqrt(d_k)
    theirs = transformers_form()

    def ours() -> tuple[torch.Tensor, torch.Tensor]:
        return deltanet.delta_rule_torch(
            q, k, v, beta, g=g, chunk_size=chunk, initial_state=state, scale=scale
        )

    def transformers() -> tuple[torch.Tensor, torch.Tensor]:
        return theirs(
            q,
            k,
            v,
            g,
            beta,
            chunk_size=chunk,
            initial_state=state,
            output_final_state=True,
            use_qk_l2norm_in_kernel=False,
        )

    return {"ours": ours, "transformers": transformers}


def check_agreement(calls: dict[str, Callable]) -> list[str]:
    """Both sides' o and final state compared (transformers' as the reference) under the
    fp32 tolerances; the comparisons as lines, or ValueError naming the ones that fail."""
    with torch.inference_mode():
        (o_ref, state_ref), (o, state) = calls["transformers"](), calls["ours"]()
    results = [compare("o", o_ref, o, "fp32"), compare("final_state", state_ref, state, "fp32")]
    failed = [str(r) for r in results if not r.ok]
    if failed:
        raise ValueError("the two forms disagree: " + "; ".join(failed))
    return [str(r) for r in results]


def time_rounds(calls: dict[str, Callable], rounds: int, warmup: int) -> dict[str, list[float]]:
    """ms per call of each side ({side: [ms, ...]}), ``rounds`` rounds after ``warmup``: in
    each, each side's second of two calls in a row; the order alternates by round."""
    sides = list(calls)
    times: dict[str, list[float]] = {side: [] for side in sides}
    with torch.inference_mode():
        for i in range(warmup + rounds):
            for side in sides if i % 2 == 0 else sides[::-1]:
                calls[side]()  # after the other side's call: untimed
                start = time.perf_counter()
                calls[side]()
                elapsed_ms = (time.perf_counter() - start) * 1e3
                if i >= warmup:
                    times[side].append(elapsed_ms)
    return times


def summary(seq_len: int, times: dict[str, list[float]], load: tuple[float, float]) -> str:
    """One line: each side's median ms and interquartile range, transformers / ours with
    its paired 95% bootstrap interval, and the 1-minute load average before and after."""
    parts = [f"T={seq_len:<5}"]
    for side in SIDES:
        ms = times[side]
        q1, _, q3 = statistics.quantiles(ms, n=4)
        parts.append(f"{side}_ms={statistics.median(ms):7.2f} (IQR {q1:.2f}-{q3:.2f})")
    ratio, low, high = ratio_interval(times["transformers"], times["ours"], paired=True)
    parts.append(f"transformers/ours={ratio:.2f}x [{low:.2f}, {high:.2f}]")
    parts.append(f"load={load[0]:.2f}->{load[1]:.2f}")
    return "  ".join(parts)


def profile(calls: dict[str, Callable], rows: int) -> str:
    """torch.profiler's top ``rows`` operators of one (warm) call of each side, by self
    CPU time."""
    tables = []
    with torch.inference_mode():
        for side in SIDES:
            calls[side]()
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                calls[side]()
            table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)
            tables.append(f"{side}:\n{table}")
    return "\n".join(tables)


def replicated(seq_len: int, processes: list[dict[str, list[float]]]) -> str:
    """One line for a T measured in several processes (each one's ``{side: [ms, ...]}``):
    transformers / ours as the median of the processes' ratios with its hierarchical 95%
    interval, the processes' ratios and their max / min."""
    ratio, low, high, kind = replicated_ratio([(t["transformers"], t["ours"]) for t in processes])
    per_process = [float(ratio_of_medians(t["transformers"], t["ours"])) for t in processes]
    maxmin, _ = between_spread(per_process)
    return (
        f"T={seq_len:<5} over {len(processes)} processes: transformers/ours={ratio:.2f}x "
        f"[{low:.2f}, {high:.2f}] ({kind}); per process "
        + " ".join(f"{r:.2f}" for r in per_process)
        + f"; max/min {maxmin:.3f}"
    )


def run_processes(argv: list[str], processes: int, seq_lens: list[int]) -> None:
    """This script in ``processes`` fresh processes, one after another, each printing its
    own lines (and its rounds as JSON, read here); then one :func:`replicated` line per T."""
    times: dict[int, list[dict[str, list[float]]]] = {t: [] for t in seq_lens}
    for i in range(processes):
        cmd = [sys.executable, __file__, *argv, "--processes", "1", "--rounds-json"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"bench_gated_delta: process {i + 1} failed:\n{done.stderr[-3000:]}")
        for line in done.stdout.splitlines():
            if line.startswith(ROUNDS_JSON):
                entry = json.loads(line[len(ROUNDS_JSON) :])
                times[entry["seq_len"]].append(entry["times"])
            elif "ours_ms=" in line:  # the process's own summary line
                print(f"process {i + 1}: {line}", flush=True)
            elif i == 0:  # the set-up and the agreement check, once
                print(line, flush=True)
    for seq_len, per_process in times.items():
        print(replicated(seq_len, per_process), flush=True)


# the prefix of the line in which a worker process hands its rounds to run_processes
ROUNDS_JSON = "rounds-json: "


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq-len", nargs="+", type=positive_int, default=[4096])
    parser.add_argument("--rounds", type=positive_int, default=30)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=positive_int, default=os.cpu_count() or 1)
    parser.add_argument("--chunk", type=positive_int, default=CHUNK, help="both sides' C")
    parser.add_argument(
        "--host-allocator",
        choices=POLICIES,
        default="retain",
        help="retain: as benchmark cells run (freed memory stays in the process)",
    )
    parser.add_argument(
        "--processes",
        type=positive_int,
        default=5,
        help="fresh processes, one after another; the ratio over them (default 5)",
    )
    parser.add_argument("--profile", action="store_true", help="profile each side once")
    parser.add_argument("--rows", type=positive_int, default=15, help="operators profiled")
    parser.add_argument("--rounds-json", action="store_true", help=argparse.SUPPRESS)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.processes > 1:
        if args.profile:
            parser.error("--profile profiles one process: give --processes 1 with it")
        run_processes(argv, args.processes, args.seq_len)
        return
    allocator = set_host_allocator(args.host_allocator)
    torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {args.threads} thread(s), {args.rounds} rounds, "
        f"chunk {args.chunk}, host allocator: {allocator}"
    )
    for seq_len in args.seq_len:
        calls = sides(make_inputs(seq_len), args.chunk)
        for line in check_agreement(calls):
            print(f"T={seq_len:<5} {line}")
        before = os.getloadavg()[0]
        times = time_rounds(calls, args.rounds, args.warmup)
        print(summary(seq_len, times, (before, os.getloadavg()[0])), flush=True)
        if args.rounds_json:
            print(ROUNDS_JSON + json.dumps({"seq_len": seq_len, "times": times}), flush=True)
        if args.profile:
            print(profile(calls, args.rows), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
