"""The operators one call of each block cell runs, at one T of a preset, without timing it:
the ``n_ops`` its bench job would record (:func:`ssmbench.measure.opcount.count_ops`),
by (model, backend, phase), for the dispatch floor's arithmetic before a run.

    python scripts/count_ops.py [--preset cpu] [--seq-len 4096] [--by-name]

Each cell's model and input are built as its bench job builds them (its seed, and a random
cache of T tokens' shapes where the plan says so), then one call is counted; on a CPU
these are ATen ops, on a cuda preset GPU kernels.  ``--by-name`` prints the ten commonest
operators of each cell beside its total.
"""

from __future__ import annotations

import argparse
from collections import Counter

import _src  # noqa: F401  (puts ../src on sys.path)

from ssmbench import config as sbconfig
from ssmbench.cell import CellSpec, _model_and_input, phase_work
from ssmbench.measure.opcount import count_ops
from ssmbench.models import GRAPH_BACKENDS


def count_cell(spec: CellSpec):
    """The :class:`ssmbench.measure.opcount.OpCount` of one call of ``spec``'s work."""
    import torch

    model, x = _model_and_input(spec)
    work = phase_work(spec.cell, model, x, spec.cache_source)
    with torch.inference_mode(not work.train):
        return count_ops(
            work.fn,
            spec.device,
            graph=spec.cell.backend in GRAPH_BACKENDS,
            compiled=spec.cell.backend == "compile",
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--by-name", action="store_true")
    args = parser.parse_args()

    plan = sbconfig.plan(sbconfig.load(overrides={"preset": args.preset}))
    cells = sorted(
        {c for c in plan.cells if c.seq_len == args.seq_len},
        key=lambda c: (c.model, c.phase, c.backend, c.batch, c.d_state, c.dtype),
    )
    if not cells:
        raise SystemExit(f"preset {args.preset} has no cell at T={args.seq_len}")
    print("model      backend      phase    batch  d_state dtype  n_ops  kind")
    for cell in cells:
        source = "random" if cell in plan.random_cache else "prefill"
        spec = CellSpec(plan.run, cell, plan.device, plan.size, plan.timing, plan.seed, source)
        count = count_cell(spec)
        n_ops = "-" if count.n_ops is None else str(count.n_ops)
        print(
            f"{cell.model:10} {cell.backend:12} {cell.phase:8} {cell.batch:5} {cell.d_state:8} "
            f"{cell.dtype:5} {n_ops:>6}  {count.kind}"
        )
        if count.n_ops is None:
            print(f"    {count.method}")
        if args.by_name:
            for name, n in Counter(count.by_name).most_common(10):
                print(f"    {n:6}  {name}")


if __name__ == "__main__":
    main()
