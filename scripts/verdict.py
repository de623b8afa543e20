"""Rule verdict: a short verdict for the report, every sentence read off the run's tables.

It says how the cells ended (counts per status); the go/no-go answer per phase at the
longest length where attention and SSMs both ran (attention's time over each SSM's with
its 95% interval, paired where the run has paired cells, and whether that interval says
the SSM is faster, attention is, or neither: ssmbench.analysis.go_no_go_table); which
backend was fastest for each family at the longest length that family ran, per phase;
and how the published claims fared.  Written as reStructuredText: the report shows it on
its landing page and as the caption of the claims table.  Beside it, tables/go_no_go.csv
(the go/no-go table itself) and tables/speedups.csv (eager over CUDA-graph decode).
"""

import pandas as pd

if "snakemake" in globals():  # run by the rule: ssmbench from this checkout's src/
    import _src  # noqa: F401  (puts ../src on sys.path)

from ssmbench.registry import PHASES, STATUSES  # noqa: E402

ALWAYS = ("ok", "unavailable", "failed")  # statuses the sentence names even when none


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def status_sentence(cells: pd.DataFrame) -> str:
    counts = cells.status.value_counts()
    known = [s for s in STATUSES if s in ALWAYS or counts.get(s, 0)]
    other = sorted(set(counts.index) - set(STATUSES))
    parts = [f"{int(counts.get(s, 0))} {s}" for s in [*known, *other]]
    run = ", ".join(sorted({str(r) for r in cells.run})) or "this run"
    return f"Run {run} planned {_count(len(cells), 'cell')}: {', '.join(parts)}."


def fastest_sentences(cells: pd.DataFrame) -> list[str]:
    """Per phase: the fastest backend of each family at that family's longest ok length
    (smallest batch there), with its margin over the runner-up backend."""
    ok = cells[(cells.status == "ok") & cells.time_ms_median.notna()]
    phases = [p for p in PHASES if p in set(ok.phase)]
    phases += sorted(set(ok.phase) - set(PHASES))
    sentences = []
    for phase in phases:
        parts = []
        for model, rows in ok[ok.phase == phase].groupby("model", sort=True):
            rows = rows[rows.seq_len == rows.seq_len.max()]
            rows = rows[rows.batch == rows.batch.min()]
            best = rows.groupby("backend").time_ms_median.min().sort_values()
            text = (
                f"{model} {best.index[0]} "
                f"({best.iloc[0]:.3g} ms at T = {int(rows.seq_len.iloc[0])}, "
                f"batch {int(rows.batch.iloc[0])}"
            )
            if len(best) > 1:
                margin = best.iloc[1] / best.iloc[0]
                text += f", {margin:.1f}x ahead of {best.index[1]}"
            parts.append(text + ")")
        if parts:
            sentences.append(
                f"Fastest {phase} backend per family at its longest length: "
                + "; ".join(parts)
                + "."
            )
    return sentences


def _span(values: pd.Series, fmt: str = "{:.2f}") -> str:
    """ "low-high" of ``values`` in ``fmt``, or one number when both ends print alike."""
    low, high = fmt.format(values.min()), fmt.format(values.max())
    return low if low == high else f"{low}-{high}"


def _interval(row) -> str:
    """ "2.73x (95% CI 2.61-2.85, paired)", or the point alone without an interval."""
    text = f"{row.latency_ratio:.2f}x"
    if pd.notna(row.latency_lo) and pd.notna(row.latency_hi):
        source = "paired" if row.interval == "paired" else "separate cells"
        text += f" (95% CI {row.latency_lo:.2f}-{row.latency_hi:.2f}, {source})"
    return text


def _precision(rows: pd.DataFrame) -> str:
    """What the rows' compute precisions say, where the two sides' differ ("" if alike)."""
    if "attention_compute_dtype" not in rows:
        return ""
    a, s = (
        rows[c].fillna("").astype(str) for c in ("attention_compute_dtype", "ssm_compute_dtype")
    )
    differ = rows[(a != s) & (a != "") & (s != "")]
    if differ.empty:
        return ""
    parts = sorted(
        {
            f"{r.ssm}: attention computes in {r.attention_compute_dtype}, "
            f"the SSM in {r.ssm_compute_dtype}"
            for r in differ.itertuples()
        }
    )
    return " Not like for like in precision: " + "; ".join(parts) + "."


def go_no_go_sentences(table: pd.DataFrame) -> list[str]:
    """Per phase, at the smallest batch and the longest T where attention and at least one
    SSM ran: attention's latency over each SSM's with its 95% interval (paired where the
    run has paired cells), its FLOP ratio, and the answer each interval supports: the SSM
    faster, attention faster, or inconclusive when the interval holds 1.  Then one line per
    phase listing every length whose answer is inconclusive."""
    sentences = []
    for phase in [p for p in PHASES if p in set(table.phase)]:
        rows = table[table.phase == phase]
        rows = rows[rows.batch == rows.batch.min()]
        rows = rows[rows.seq_len == rows.seq_len.max()]
        backends = ", ".join(
            sorted(
                {
                    f"{a} vs {s}"
                    for a, s in zip(rows.attention_backend, rows.ssm_backend, strict=True)
                }
            )
        )
        parts = []
        for r in rows.itertuples():
            part = f"{r.ssm} {_interval(r)}"
            if pd.notna(r.flop_ratio) and r.flop_ratio > 0:
                # latency ratio over FLOP ratio: 1.00 turns the FLOP saving fully into speed
                part += (
                    f" for {r.flop_ratio:.2f}x the FLOPs "
                    f"({r.latency_ratio / r.flop_ratio:.2f} of the FLOP ratio as speed)"
                )
            if r.answer:
                part += f": {r.answer}"
            parts.append(part)
        text = (
            f"Go/no-go, {phase} at T = {int(rows.seq_len.iloc[0])}, batch "
            f"{int(rows.batch.iloc[0])} ({backends}): attention over each SSM, "
            + "; ".join(parts)
            + "."
        )
        sentences.append(text + _precision(rows))
        open_points = table[(table.phase == phase) & (table.answer == "inconclusive")]
        if not open_points.empty:
            listed = ", ".join(
                f"{r.ssm} at T = {int(r.seq_len)} (batch {int(r.batch)})"
                for r in open_points.itertuples()
            )
            sentences.append(
                f"Inconclusive in {phase} (the 95% interval holds 1, no answer): {listed}."
            )
    return sentences


def claims_sentence(claims: pd.DataFrame) -> str:
    if claims.empty:
        return "No published claim was checked."
    counts = claims.verdict.value_counts()
    parts = [f"{int(n)} {verdict}" for verdict, n in counts.items()]
    return f"Of {_count(len(claims), 'published claim')} checked against this run: " + (
        ", ".join(parts) + "."
    )


def verdict_rst(cells: pd.DataFrame, claims: pd.DataFrame, go_no_go: pd.DataFrame) -> str:
    """The verdict as reStructuredText: the status sentence, then a bullet per finding;
    ``go_no_go`` is the go/no-go table (ssmbench.analysis.go_no_go_table)."""
    points = [*go_no_go_sentences(go_no_go), *fastest_sentences(cells), claims_sentence(claims)]
    return status_sentence(cells) + "\n\n" + "".join(f"- {p}\n" for p in points)


if "snakemake" in globals():  # run by the rule; importable by the tests
    from ssmbench.provenance import from_snakemake, now
    from ssmbench.scripting import logged

    with logged(snakemake):  # noqa: F821
        started = now()
        from ssmbench.analysis import go_no_go_table, speedups_table
        from ssmbench.tables import read_cells, read_paired_table

        cells = read_cells(snakemake.input.cells)  # noqa: F821
        samples = pd.read_parquet(snakemake.input.samples)  # noqa: F821
        paired = read_paired_table(snakemake.input.paired)  # noqa: F821
        claims = pd.read_csv(snakemake.input.claims)  # noqa: F821
        out = snakemake.output  # noqa: F821
        table = go_no_go_table(cells, samples=samples, paired=paired)
        table.to_csv(out.go_no_go, index=False, float_format="%.4g")
        speedups_table(cells, samples).to_csv(out.speedups, index=False, float_format="%.4g")
        with open(out.rst, "w") as f:
            f.write(verdict_rst(cells, claims, table))
        outputs = [out.rst, out.go_no_go, out.speedups]
        from_snakemake(snakemake, outputs=outputs, started=started)  # noqa: F821
