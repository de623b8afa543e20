"""Mamba-1's training step with the torch backend's forms under autograd, old against
new, and its prefill, measured in rounds that interleave them in one run.

    python scripts/bench_mamba_train.py [--cases parity selective_copy ...] [--rounds 15]
                                        [--threads 1] [--host-allocator system] [--profile]

The new forms are what the ``torch`` backend runs under autograd: the scan by
:func:`ssmbench.models.mamba.chunked_scan` (chunks with a backward of their own) and the
causal conv by :meth:`ssmbench.models.common.CausalConv1d.shifted` (shifted
multiply-adds).  The old ones are autograd through what the backend runs without
gradients (and ran under autograd too, before): the scan's log-space blocks
(:func:`ssmbench.models.mamba.blocked_scan`) and torch's conv1d.  :func:`forms` puts
them in place for the old side's calls only (:func:`selective_scan_autograd`,
:func:`conv1d_autograd`).

Cases (:data:`CASES`):

- ``parity``, ``selective_copy``: one training step of the case study's Mamba-1 task
  model (config/tasks.yaml: its size, and a batch of its training data at its training
  length): gradients set to None, forward, cross-entropy, backward.  The optimizer's
  update is left out: it is the same for both sides.
- ``train-1024``: the ``cpu`` preset's Mamba-1 train cell (b 1, T 1024, d_model 256,
  d_state 16, 2 layers; loss mean(y^2)), as ``ssmbench.cell`` times it.
- ``prefill-1024``, ``prefill-4096``: the ``cpu`` preset's prefill (b 1, no gradients):
  both sides run blocked_scan and conv1d, so the ratio shows what the dispatch costs.

Each round calls each side twice in a row and times the second call, the order of the
sides alternating from round to round; both sides share the weights and inputs.  A
training job runs one form, step after step: the untimed call puts the side's memory and
caches where its own last step left them, not where the other side's did (the old side
peaks at 4-7x the new one's memory), as scripts/bench_ratios.py times its warm calls.
Per case and clock (wall: ``perf_counter``; cpu: this process's CPU time,
``process_time``, which other jobs on a shared machine inflate less), it prints each
side's median ms with its interquartile range, and old / new with its 95% interval (a
paired bootstrap over the rounds, :func:`ssmbench.stats.ratio_interval`).
With ``--profile``: each side's peak tensor memory in a step, its allocations of at least
``--big-mib``, and torch.profiler's top operators by self CPU time (forward and backward
are ranges of their own).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable, Iterator

import torch

from ssmbench.matrix import Size
from ssmbench.measure.allocator import POLICIES, set_host_allocator
from ssmbench.measure.memory import measure_peak, memory_deltas
from ssmbench.models import build_model, mamba
from ssmbench.models.common import CausalConv1d, widen
from ssmbench.scripting import positive_int
from ssmbench.stats import ratio_interval
from ssmbench.tasks.data import make
from ssmbench.tasks.matrix import load_tasks
from ssmbench.tasks.model import build_task_model
from ssmbench.tasks.train import task_loss

# the cpu preset's block (config/config.yaml, presets.cpu.size) and its d_state
CPU_SIZE = Size(d_model=256, n_layers=2, n_heads=4, head_dim=64, expand=2, d_conv=4, chunk=64)
CPU_D_STATE = 16
CASES = ("parity", "selective_copy", "train-1024", "prefill-1024", "prefill-4096")
SIDES = ("old", "new")
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
# the profiler ranges --profile sums: a step's forward and backward, and the scan's
# forward (the range pick_backend runs the operator in)
PROFILED_RANGES = ("forward", "backward", "ssmbench::ssm_scan::selective_scan")


def selective_scan_autograd(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    delta_bias: torch.Tensor | None = None,
    delta_softplus: bool = False,
    initial_state: torch.Tensor | None = None,
    chunk_size: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The torch backend's scan as it was before :func:`~ssmbench.models.mamba.chunked_scan`:
    :func:`~ssmbench.models.mamba.blocked_scan` under autograd as well (arguments and
    results as :func:`~ssmbench.models.mamba.selective_scan_torch`)."""
    out_dtype = u.dtype
    u, delta, A, B, C, D, z, delta_bias, initial_state = widen(
        u, delta, A, B, C, D, z, delta_bias, initial_state
    )
    delta = mamba._discretise_delta(delta, delta_bias, delta_softplus)
    y, h = mamba.blocked_scan(delta * u, delta, A, B, C, initial_state, chunk_size=chunk_size)
    in_place = not torch.is_grad_enabled()  # as the torch backend: no graph needs y
    return mamba._output_gate(y, u, D, z, in_place).to(out_dtype), h


def conv1d_autograd(conv: CausalConv1d, x: torch.Tensor) -> torch.Tensor:
    """The causal conv (before SiLU) as it was before
    :meth:`~ssmbench.models.common.CausalConv1d.shifted`: torch's conv1d under autograd
    as well.  x ``(b, t, d)`` -> ``(b, t, d)``."""
    T = x.shape[1]
    return torch.nn.Conv1d.forward(conv, x.transpose(1, 2))[..., :T].transpose(1, 2)


@contextlib.contextmanager
def forms(side: str) -> Iterator[None]:
    """Inside the block, the torch backend's scan and the causal conv run their ``side``
    forms under autograd ("old" or "new")."""
    if side not in SIDES:
        raise ValueError(f"unknown side {side!r}; known: {SIDES}")
    scan, shifted = mamba.SCAN_BACKENDS["torch"], CausalConv1d.shifted
    if side == "old":
        mamba.SCAN_BACKENDS["torch"], CausalConv1d.shifted = (
            selective_scan_autograd,
            conv1d_autograd,
        )
    try:
        yield
    finally:
        mamba.SCAN_BACKENDS["torch"], CausalConv1d.shifted = scan, shifted


def task_step(task: str, seed: int = 0) -> Callable[[], None]:
    """One training step (forward, loss, backward) of ``task``'s Mamba-1 model on the first
    batch of its training data (config/tasks.yaml)."""
    spec = load_tasks()[task]
    params = dict(spec["data"]["train"])
    params.pop("n")
    batch = spec["train"]["batch_size"]
    data = make(task, "train", batch, seed=spec["data"]["seed"], **params)
    model = build_task_model("mamba", spec["models"]["mamba"], data, seed=seed).train()
    inputs, targets = torch.from_numpy(data.inputs), torch.from_numpy(data.targets)

    def step() -> None:
        model.zero_grad(set_to_none=True)
        with torch.profiler.record_function("forward"):
            loss = task_loss(model(inputs), targets)
        with torch.profiler.record_function("backward"):
            loss.backward()

    return step


def cell_step(phase: str, seq_len: int, seed: int = 0) -> Callable[[], None]:
    """The cpu preset's Mamba-1 ``phase`` cell ("train" or "prefill") at batch 1."""
    model = build_model("mamba", CPU_SIZE, CPU_D_STATE, "torch", seed=seed)
    x = torch.randn(1, seq_len, CPU_SIZE.d_model, generator=torch.Generator().manual_seed(seed))
    if phase == "prefill":

        def prefill() -> None:
            with torch.inference_mode():
                model(x)

        return prefill
    params = list(model.parameters())

    def train() -> None:
        for p in params:
            p.grad = None
        with torch.profiler.record_function("forward"):
            y, _ = model(x)
            loss = y.float().square().mean()
        with torch.profiler.record_function("backward"):
            loss.backward()

    return train


def case_step(case: str) -> Callable[[], None]:
    """The callable one round times for ``case`` (:data:`CASES`)."""
    if case in ("parity", "selective_copy"):
        return task_step(case)
    phase, seq_len = case.split("-")
    return cell_step(phase, int(seq_len))


def time_case(
    step: Callable[[], None], rounds: int, warmup: int = 2
) -> dict[str, dict[str, list[float]]]:
    """ms per call of ``step`` under each side and clock ({side: {clock: [ms, ...]}}),
    ``rounds`` rounds after ``warmup``: in each, each side's second of two calls in a row;
    the order of the sides alternates by round."""
    times = {side: {clock: [] for clock in CLOCKS} for side in SIDES}
    for i in range(warmup + rounds):
        for side in SIDES if i % 2 == 0 else SIDES[::-1]:
            with forms(side):
                step()  # after the other side's call: untimed
                start = {clock: now() for clock, now in CLOCKS.items()}
                step()
                elapsed_ms = {clock: (now() - start[clock]) * 1e3 for clock, now in CLOCKS.items()}
            if i >= warmup:
                for clock, ms in elapsed_ms.items():
                    times[side][clock].append(ms)
    return times


def summary(case: str, clock: str, times: dict[str, dict[str, list[float]]]) -> str:
    """One line: each side's median and interquartile range on ``clock``, and old / new
    with its paired 95% bootstrap interval."""
    parts = [f"{case:<15} {clock:<4}"]
    for side in SIDES:
        ms = times[side][clock]
        q1, _, q3 = statistics.quantiles(ms, n=4)
        parts.append(f"{side}_ms={statistics.median(ms):8.1f} (IQR {q1:.1f}-{q3:.1f})")
    ratio, low, high = ratio_interval(times["old"][clock], times["new"][clock], paired=True)
    parts.append(f"speedup={ratio:.2f}x [{low:.2f}, {high:.2f}]")
    return "  ".join(parts)


def profile_case(step: Callable[[], None], side: str, rows: int, big_mib: float) -> str:
    """``side``'s step once more, profiled: its peak tensor memory, its allocations of at
    least ``big_mib`` MiB (count and total), the CPU time of :data:`PROFILED_RANGES`, and
    the top ``rows`` operators by self CPU time."""
    with forms(side):
        peak_mib = measure_peak(step, "cpu")["peak_bytes"] / 2**20
        step()  # warm, after the memory profile
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            step()
        with torch.profiler.profile(profile_memory=True) as mem:
            step()
    big = [b / 2**20 for b in memory_deltas(mem) if b >= big_mib * 2**20]
    events = prof.key_averages()
    ranges = {e.key: e.cpu_time_total / 1e3 for e in events if e.key in PROFILED_RANGES}
    head = (
        f"{side}: peak {peak_mib:.0f} MiB; {len(big)} allocations of >= {big_mib:g} MiB, "
        f"{sum(big):.0f} MiB in all; "
        + ", ".join(f"{name} {ms:.1f} ms" for name, ms in ranges.items())
    )
    return f"{head}\n{events.table(sort_by='self_cpu_time_total', row_limit=rows)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--rounds", type=positive_int, default=15)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=positive_int, default=1, help="as training jobs")
    parser.add_argument(
        "--host-allocator",
        choices=POLICIES,
        default="system",
        help="system: as training jobs run (ssmbench.tasks); retain: as benchmark cells run",
    )
    parser.add_argument("--profile", action="store_true", help="profile each side once")
    parser.add_argument("--rows", type=positive_int, default=15, help="operators profiled")
    parser.add_argument("--big-mib", type=float, default=1.0, help="a big allocation, MiB")
    args = parser.parse_args()
    allocator = set_host_allocator(args.host_allocator)
    torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {args.threads} thread(s), {args.rounds} rounds, "
        f"host allocator: {allocator}"
    )
    for case in args.cases:
        step = case_step(case)
        times = time_case(step, args.rounds, args.warmup)
        for clock in CLOCKS:
            print(summary(case, clock, times), flush=True)
        if args.profile:
            for side in SIDES:
                print(profile_case(step, side, args.rows, args.big_mib), flush=True)


if __name__ == "__main__":
    main()
