"""Attention decode with the KV cache written in place, against the concatenating step it
replaced; both in one process, interleaved, so the ratio compares like with like.

    python scripts/bench_kv_cache.py [--model attention] [--seq-len 4096] [--rounds 30]

The decode cell of the `cpu` preset (its block size, batch 1, fp32, all cores, freed
memory kept as in the presets): a prefill of T tokens with the torch backend builds the
cache, then each round times one decode step of each variant, twice in a row (the second,
warm, call counts, as a cell's samples follow its warm-up):

- ``in-place``: the torch backend as the cells run it now: the cache in a buffer of
  T + 1 tokens, each step writing its key and value at slot T;
- ``concat``: the same torch backend (SDPA) with the step of before, which concatenated
  a new cache each token (``torch.cat``: a copy of the whole cache per layer per token).

Prints each variant's median and interquartile range, and the ratio concat / in-place:
the median of the per-round ratios (the rounds pair the two) with their 10th-90th
percentiles.
"""

from __future__ import annotations

import argparse
import statistics
import time
from unittest import mock

import torch

from ssmbench.config import load, plan
from ssmbench.measure.allocator import set_host_allocator
from ssmbench.models import attention, build_model
from ssmbench.scripting import positive_int


def _quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="attention", choices=["attention", "hybrid"])
    parser.add_argument("--seq-len", type=positive_int, default=4096)
    parser.add_argument("--rounds", type=positive_int, default=30)
    parser.add_argument("--threads", type=positive_int, help="default: all cores")
    args = parser.parse_args()

    preset = plan(load(overrides={"preset": "cpu"}))
    set_host_allocator(preset.timing.host_allocator)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = build_model(args.model, preset.size, 16, "torch", seed=0)
    x = torch.randn(
        1, args.seq_len, preset.size.d_model, generator=torch.Generator().manual_seed(0)
    )
    x_t = x[:, -1].clone()
    with torch.inference_mode():
        _, prefill = model(x)
        buffers = model.decode_caches(prefill, capacity=args.seq_len + 1)

    def in_place():
        return model.step(x_t, buffers)

    def concat():  # the step of before: the torch backend concatenating its cache
        with mock.patch.object(attention, "CONCAT_BACKENDS", ("naive", "torch")):
            return model.step(x_t, prefill)

    variants = {"in-place": in_place, "concat": concat}
    samples: dict[str, list[float]] = {name: [] for name in variants}
    with torch.inference_mode():
        for fn in variants.values():  # warm-up
            fn(), fn()
        for _ in range(args.rounds):
            for name, fn in variants.items():
                fn()  # cold call, after the other variant
                start = time.perf_counter()
                fn()
                samples[name].append((time.perf_counter() - start) * 1e3)

    print(
        f"{args.model} decode step after T={args.seq_len} cached tokens, batch 1, fp32, "
        f"{torch.get_num_threads()} threads, {args.rounds} interleaved rounds"
    )
    for name, ms in samples.items():
        q1, q3 = _quantile(ms, 0.25), _quantile(ms, 0.75)
        print(f"  {name:9s} median {statistics.median(ms):8.3f} ms  IQR {q1:.3f}-{q3:.3f} ms")
    ratios = [c / i for c, i in zip(samples["concat"], samples["in-place"], strict=True)]
    lo, hi = _quantile(ratios, 0.10), _quantile(ratios, 0.90)
    ratio = statistics.median(ratios)
    print(f"  concat / in-place: {ratio:.2f}x (per-round 10-90%: {lo:.2f}-{hi:.2f}x)")


if __name__ == "__main__":
    main()
