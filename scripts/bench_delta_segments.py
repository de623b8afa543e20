"""How large a segment of chunks the chunked delta rule should take at a time on CPU
(``ssmbench.models.deltanet._CPU_SEGMENT_BYTES``): the ``torch`` operator at each segment
size, in interleaved rounds in one process.

    python scripts/bench_delta_segments.py [--seq-len 1024 4096 16384 65536]
                                           [--mib 1 4 16 0] [--rounds 10] [--threads 2]

Inputs and shapes are scripts/bench_gated_delta.py's (the cpu preset's delta-rule operator,
fp32, with the queries' scale); ``--mib 0`` is every chunk at once.  Each round calls each
size twice in a row and times the second call, the order alternating from round to round
(bench_gated_delta's ``time_rounds``).  Per T it prints each size's median ms and, for every
size but the first, first / it with its paired 95% interval
(:func:`ssmbench.stats.ratio_interval`): above 1, that size is faster than the first.

Sizes at or above a T's whole working set run the same code (at T = 1024 the 16 chunks
take 1 MiB): their differences there are the script's own noise, up to 13% between the
medians of four identical calls on the 2-core VM, about 5% at T = 4096.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

import _src  # noqa: F401  (puts ../src on sys.path)
import torch
from bench_gated_delta import BATCH, CHUNK, HEAD_DIM, HEADS, make_inputs, time_rounds

from ssmbench.measure.allocator import set_host_allocator
from ssmbench.models import deltanet
from ssmbench.scripting import positive_int
from ssmbench.stats import ratio_interval


def at_segment(inputs: dict[str, torch.Tensor], segment_bytes: int) -> Callable:
    """The operator on ``inputs`` with segments of ``segment_bytes`` (0: every chunk)."""
    names = ("q", "k", "v", "beta", "g", "initial_state")
    q, k, v, beta, g, state = (inputs[name] for name in names)
    limit = segment_bytes or 1 << 62

    def call():
        deltanet._CPU_SEGMENT_BYTES = limit
        return deltanet.delta_rule_torch(
            q, k, v, beta, g=g, chunk_size=CHUNK, initial_state=state, scale=HEAD_DIM**-0.5
        )

    return call


def label(mib: int) -> str:
    return f"{mib} MiB" if mib else "all chunks"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq-len", nargs="+", type=positive_int, default=[1024, 4096, 16384])
    parser.add_argument("--mib", nargs="+", type=int, default=[1, 4, 16, 0])
    parser.add_argument("--rounds", type=positive_int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=positive_int, default=2)
    args = parser.parse_args(argv)
    if any(m < 0 for m in args.mib):
        parser.error("--mib: sizes are >= 0 (0: every chunk at once)")
    set_host_allocator("retain")
    torch.set_num_threads(args.threads)
    default = deltanet._CPU_SEGMENT_BYTES
    print(
        f"torch {torch.__version__}, {args.threads} thread(s), {args.rounds} rounds; "
        f"batch {BATCH}, {HEADS} heads, d_k = d_v = {HEAD_DIM}, chunk {CHUNK}; "
        f"the operator's segments now: {default / 2**20:g} MiB"
    )
    try:
        for seq_len in args.seq_len:
            inputs = make_inputs(seq_len)
            calls = {label(m): at_segment(inputs, m << 20) for m in args.mib}
            times = time_rounds(calls, args.rounds, args.warmup)
            first = label(args.mib[0])
            parts = [f"T={seq_len:<6}"]
            parts += [f"{name}: {statistics.median(ms):8.2f} ms" for name, ms in times.items()]
            for name in list(times)[1:]:
                ratio, low, high = ratio_interval(times[first], times[name], paired=True)
                parts.append(f"{first} / {name} = {ratio:.3f} [{low:.3f}, {high:.3f}]")
            print("  ".join(parts), flush=True)
    finally:
        deltanet._CPU_SEGMENT_BYTES = default


if __name__ == "__main__":
    main()
