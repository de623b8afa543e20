"""Command line: measure one cell ad hoc, verify one (model, backend), or lock the GPU clocks.

    python -m ssmbench cell --model mamba --backend torch --seq-len 2048
    python -m ssmbench verify --model attention --backend naive
    python -m ssmbench plan --preset lease      # jobs and estimated seconds
    python -m ssmbench pack DEST --run lease    # a run's outputs as a few files
    python -m ssmbench verify-provenance results/precollected   # shipped runs, unchanged?
    python -m ssmbench manifest results/precollected/cpu        # a shipped run's manifest
    python -m ssmbench clocks lock|restore|status
    python -m ssmbench floors --device NAME [--run DIR] [--dispatch-us X]  # a PROJECTION
    python -m ssmbench lm-cell --model mamba2-130m --backend hf-eager --phase decode \
        --seq-len 256 --new-tokens 8 --preset ci --out r.json    # one whole-model cell

``verify`` of a graph backend (torch-graph, fused-graph) verifies its base backend and says
so (``note``).  ``clocks`` locks the GPU's graphics clock at its highest supported value
(``nvidia-smi -lgc``, root only; never on a rented or shared machine), restores it, or
shows it (:mod:`ssmbench.measure.clocks`); a run script that locks exports
SSMBENCH_CLOCKS_LOCKED=1 so that every cell record says ``clocks_locked``.

``verify-provenance`` checks each shipped run (a folder with ``MANIFEST.sha256``, or every
run in a folder of them) file by file against its sidecars and its manifest, and names every
mismatch with the sha256 expected and the one found (exit 1); ``manifest`` writes a run's
manifest, only from files that their sidecars vouch for
(:mod:`ssmbench.provenance`).

``cell`` verifies the backend first (as the workflow does), then measures the cell with the
size and timing budget of a preset (``--preset``, default ``cpu``) and prints its record as
JSON; the workflow's bench rule calls the same :func:`ssmbench.cell.run_cell`.

``floors`` prints each cell of a run (default: the shipped cpu run) with its three floors
on a catalogue device, labelled PROJECTION: the datasheet's bandwidth and peak, and a
dispatch cost measured there or stated (``--dispatch-us``, with ``--dispatch-source``);
where the run was measured on that device, the measured floors and median beside them
(:mod:`ssmbench.projection`).

``lm-cell`` measures one whole-model cell (:func:`ssmbench.lm.cell.run_lm_cell`: the gate,
then TTFT or TPOT, the memory split and energy) and prints its record; ``--preset`` is the
model's size (full, reduced, ci: config/models.yaml) and ``--timing`` the config preset
whose timing budget it takes.  For ``hf-eager`` it blocks the kernel packages before
anything imports transformers (:func:`ssmbench.lm.backends.prepare`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ssmbench import config as sbconfig
from ssmbench import registry
from ssmbench.cell import CellSpec, run_cell
from ssmbench.matrix import Cell, Size, Timing
from ssmbench.process import cap_address_space
from ssmbench.records import write_record
from ssmbench.registry import NO_STATE
from ssmbench.scripting import positive_int

# The registry's names, without importing torch for --help (graph backends included).
FAMILIES = list(registry.FAMILIES)
BACKENDS = list(registry.BACKENDS)


def _preset(name: str) -> dict:
    presets = sbconfig.load()["presets"]
    if name not in presets:
        raise SystemExit(f"error: unknown preset {name!r}; known: {sorted(presets)}")
    return presets[name]


def parser() -> argparse.ArgumentParser:
    """The command line's parser, every subcommand's arguments, without importing torch
    (``tests/test_docs.py`` parses the commands the docs show with it)."""
    cli = argparse.ArgumentParser(prog="python -m ssmbench", description=__doc__.split("\n")[0])
    sub = cli.add_subparsers(dest="command", required=True)

    def common(p):
        p.add_argument("--model", required=True, choices=FAMILIES)
        p.add_argument("--backend", required=True, choices=BACKENDS)
        p.add_argument("--preset", default="cpu", help="size, timing and device (default: cpu)")
        p.add_argument("--device", choices=["cpu", "cuda"], help="default: the preset's")
        p.add_argument("--dtype", default="fp32", choices=registry.SWEEP_DTYPES)
        p.add_argument("--seed", type=int, default=0)

    cell = sub.add_parser("cell", help="verify, then measure one cell and print its record")
    common(cell)
    cell.add_argument("--phase", default="prefill", choices=registry.PHASES)
    cell.add_argument("--batch", type=positive_int, default=1)
    cell.add_argument("--seq-len", type=positive_int, required=True)
    cell.add_argument("--d-state", type=positive_int, default=16)
    cell.add_argument(
        "--cache",
        default="prefill",
        choices=["prefill", "random"],
        help="decode: build the cache by a prefill of T tokens, or fill it with random values",
    )
    cell.add_argument("--threads", type=positive_int, help="CPU threads (default: all cores)")
    cell.add_argument("--no-verify", action="store_true", help="time without verifying first")
    cell.add_argument(
        "--mem-limit-gb",
        type=float,
        help="cap this process's address space (RLIMIT_AS) so that a cell over it is oom "
        "(default: the preset's cpu_mem_limit_gb on CPU)",
    )
    cell.add_argument("--out", help="also write the record to this path")
    cell.add_argument("--summary", action="store_true", help="print one line, not the record")

    verify = sub.add_parser("verify", help="check a backend against the float64 reference")
    common(verify)

    plan = sub.add_parser("plan", help="a preset's jobs with estimated seconds (ssmbench.budget)")
    plan.add_argument("--preset", default="auto")
    plan.add_argument("--run", help="the run's name (default: the preset's)")
    plan.add_argument("--jobs", action="store_true", help="also list every job")

    pack = sub.add_parser("pack", help="pack a run's outputs into a few files (ssmbench.pack)")
    pack.add_argument("dest")
    pack.add_argument("--run", required=True)
    pack.add_argument("--extra", nargs="*", default=[], help="files to send as they are")

    check = sub.add_parser(
        "verify-provenance", help="check shipped runs against their sidecars and manifests"
    )
    check.add_argument("dirs", nargs="+", help="a run's folder, or a folder of runs")

    manifest = sub.add_parser("manifest", help="write a shipped run's MANIFEST.sha256")
    manifest.add_argument("run_dir")

    clocks = sub.add_parser("clocks", help="lock, restore or show the GPU clocks (opt-in)")
    clocks.add_argument("action", choices=["lock", "restore", "status"])
    clocks.add_argument("--gpu", type=int, default=0, help="nvidia-smi device index")

    floors = sub.add_parser(
        "floors", help="each cell's floors on a catalogue device (a PROJECTION)"
    )
    floors.add_argument("--device", required=True, help="a config/devices.yaml entry")
    floors.add_argument(
        "--run", default="results/precollected/cpu", help="a run's folder (its tables/cells.csv)"
    )
    floors.add_argument(
        "--dispatch-us", type=float, help="assumed cost of one dispatch there, microseconds"
    )
    floors.add_argument(
        "--dispatch-source", default="", help="where the assumed dispatch cost comes from"
    )

    _lm_cell_parser(sub)
    return cli


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "lm-cell":
        return _lm_cell(args)
    if args.command == "clocks":
        return _clocks(args.action, args.gpu)
    if args.command == "plan":
        return _print_plan(args)
    if args.command == "verify-provenance":
        return _verify_provenance(args.dirs)
    if args.command == "manifest":
        return _manifest(args.run_dir)
    if args.command == "floors":
        return _floors(args)
    if args.command == "pack":
        from ssmbench.pack import pack as pack_run

        packed = pack_run(args.dest, args.run, extra=args.extra)
        for path in packed.files:
            print(f"   {path.name:40s} {path.stat().st_size:>10d} bytes")
        for note in packed.left_out:
            print(f"   left out: {note}")
        return 0
    preset = _preset(args.preset)
    device = args.device or preset["device"]

    verify_record = None
    if args.command == "verify" or not args.no_verify:
        from ssmbench.verify.run import run_verify  # imports torch: not for --help

        verify_record = run_verify(args.model, args.backend, device, [args.dtype], args.seed)
    if args.command == "verify":
        print(json.dumps(verify_record, indent=1))
        return 0 if verify_record["passed"] else 1

    d_state = 0 if args.model in NO_STATE else args.d_state
    spec = CellSpec(
        run="adhoc",
        cell=Cell(
            args.model, args.backend, args.phase, args.batch, args.seq_len, d_state, args.dtype
        ),
        device=device,
        size=Size(**preset["size"]),
        timing=Timing(**preset["timing"]),
        seed=args.seed,
        cache_source=args.cache,
    )
    limit = args.mem_limit_gb or (preset.get("cpu_mem_limit_gb") if device == "cpu" else None)
    if limit:
        cap_address_space(limit)
    record = run_cell(spec, verify=verify_record, threads=args.threads)
    if args.out:
        write_record(args.out, record)
    if args.summary:
        print(
            f"{args.model}/{args.backend} {args.phase} b{args.batch} t{args.seq_len}: "
            f"{record.status} {record.reason} median={record.time_ms_median} ms "
            f"p95={record.time_ms_p95} ms n={record.n_samples}"
        )
    else:
        print(json.dumps(record.to_dict(), indent=1))
    return 0 if record.status == "ok" else 1


def _lm_cell_parser(sub) -> None:
    from ssmbench.lm import backends, zoo

    lm = sub.add_parser("lm-cell", help="measure one whole-model cell and print its record")
    lm.add_argument("--model", required=True, choices=list(zoo.entries()))
    lm.add_argument("--backend", required=True, choices=list(backends.BACKENDS))
    lm.add_argument("--phase", default="prefill", choices=["prefill", "decode"])
    lm.add_argument("--batch", type=positive_int, default=1)
    lm.add_argument("--seq-len", type=positive_int, required=True)
    lm.add_argument(
        "--new-tokens",
        type=positive_int,
        help="decode: N of generate(N), N - 1 timed steps (default 16); prefill: 1",
    )
    lm.add_argument("--dtype", default="fp32", choices=["fp32", "fp16", "bf16"])
    lm.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    lm.add_argument("--preset", default="full", choices=list(zoo.PRESETS), help="model size")
    lm.add_argument(
        "--timing",
        help="the config preset whose timing budget to use (default: ci for --preset ci, "
        "else the device's: cpu or gpu)",
    )
    lm.add_argument("--min-samples", type=positive_int, help="override the budget's")
    lm.add_argument("--max-time-s", type=float, help="override the budget's")
    lm.add_argument("--timeout-s", type=float, help="override the budget's")
    lm.add_argument("--seed", type=int, default=0)
    lm.add_argument("--run", default="adhoc")
    lm.add_argument("--threads", type=positive_int, help="CPU threads (default: all cores)")
    lm.add_argument("--mem-limit-gb", type=float, help="cap the address space (RLIMIT_AS)")
    lm.add_argument("--no-verify", action="store_true", help="time without the gate first")
    lm.add_argument("--out", help="also write the record to this path")


def _lm_cell(args) -> int:
    """One whole-model cell: block the kernel packages first (hf-eager), then measure."""
    from ssmbench.lm import backends

    backends.prepare(args.backend)  # before anything imports transformers
    from ssmbench.lm.cell import LMCellSpec, run_lm_cell
    from ssmbench.lm.record import write_lm_record

    timing_preset = args.timing or (
        "ci" if args.preset == "ci" else {"cpu": "cpu", "cuda": "gpu"}[args.device]
    )
    timing = dict(_preset(timing_preset)["timing"])
    for key in ("min_samples", "max_time_s", "timeout_s"):
        if getattr(args, key) is not None:
            timing[key] = getattr(args, key)
    timing["max_samples"] = max(timing["max_samples"], timing["min_samples"])
    new_tokens = args.new_tokens or (16 if args.phase == "decode" else 1)
    try:
        spec = LMCellSpec(
            model=args.model,
            backend=args.backend,
            phase=args.phase,
            batch=args.batch,
            seq_len=args.seq_len,
            new_tokens=new_tokens,
            dtype=args.dtype,
            device=args.device,
            preset=args.preset,
            timing=Timing(**timing),
            seed=args.seed,
            run=args.run,
        )
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.mem_limit_gb:
        cap_address_space(args.mem_limit_gb)
    record = run_lm_cell(spec, threads=args.threads, gate=not args.no_verify)
    if args.out:
        write_lm_record(args.out, record)
    print(json.dumps(record.to_dict(), indent=1))
    return 0 if record.status == "ok" else 1


def _print_plan(args) -> int:
    from ssmbench import budget

    overrides = {"preset": args.preset, **({"run": args.run} if args.run else {})}
    try:
        plan = sbconfig.plan(sbconfig.load(overrides=overrides))
    except sbconfig.ConfigError as e:
        raise SystemExit(f"error: {e}") from None
    print(budget.describe(plan))
    if args.jobs:
        for job in budget.jobs(plan):
            print(f"  {job.rule:10s} {job.seconds:7.1f} s  {job.name}")
    return 0


def _verify_provenance(dirs: list[str]) -> int:
    from ssmbench.provenance import MANIFEST, ProvenanceError, verify_run

    runs = []
    for d in map(Path, dirs):  # a run, or a folder of runs (each must have a manifest)
        if not d.is_dir():
            print(f"error: {d}: no such folder", file=sys.stderr)
            return 1
        runs += [d] if (d / MANIFEST).is_file() else sorted(p for p in d.iterdir() if p.is_dir())
    if not runs:
        print(f"error: no run in {' '.join(dirs)}", file=sys.stderr)
        return 1
    failed = 0
    for run_dir in runs:
        try:
            digest = verify_run(run_dir)
        except ProvenanceError as e:
            print(f"error: {run_dir} is not what its provenance records:\n{e}", file=sys.stderr)
            failed += 1
        else:
            print(f"ok: {run_dir} matches its sidecars and {MANIFEST} (sha256 {digest})")
    return 1 if failed else 0


def _manifest(run_dir: str) -> int:
    from ssmbench.provenance import ProvenanceError, read_manifest, sha256, write_manifest

    try:
        manifest = write_manifest(run_dir)
    except ProvenanceError as e:
        print(f"error: {run_dir}: no manifest written; not vouched for:\n{e}", file=sys.stderr)
        return 1
    n = len(read_manifest(manifest))
    print(f"{manifest}: {n} files (sha256 {sha256(manifest)})")
    return 0


def _floors(args) -> int:
    from ssmbench.projection import report

    if args.dispatch_us is not None and not args.dispatch_us > 0:
        print(f"error: --dispatch-us {args.dispatch_us}: a cost must be positive", file=sys.stderr)
        return 2
    try:
        text = report(args.device, args.run, args.dispatch_us, args.dispatch_source)
    except (KeyError, ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(text)
    return 0


def _clocks(action: str, gpu: int) -> int:
    from ssmbench.measure import clocks

    try:
        if action == "lock":
            mhz = clocks.lock(gpu)
            print(f"GPU {gpu}: graphics clock locked at {mhz} MHz; export {clocks.ENV_VAR}=1")
        elif action == "restore":
            clocks.restore(gpu)
            print(f"GPU {gpu}: graphics clock restored; unset {clocks.ENV_VAR}")
        else:
            print(json.dumps(clocks.status(gpu)))
    except clocks.ClockError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
