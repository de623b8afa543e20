"""Rule verdict: a short verdict for the report, every sentence read off the run's tables.

It says how the cells ended (counts per status); the go/no-go answer per phase at the
longest length where attention and SSMs both ran (attention's FLOPs and time over each
SSM's, strongest backends only: ssmbench.plots.go_no_go_table); which backend was fastest
for each family at the longest length that family ran, per phase; and how the published
claims fared.  Written as reStructuredText: the report shows it on its landing page and as
the caption of the claims table.  Beside it, tables/go_no_go.csv: the go/no-go table itself.
"""

import pandas as pd

# Cell statuses in DESIGN.md's order ("Status is data"), as ssmbench.records.STATUSES (not
# imported: the rule puts src/ on sys.path only below); the first three are always named.
STATUSES = ("ok", "oom", "unavailable", "timeout", "failed", "not_run")
ALWAYS = ("ok", "unavailable", "failed")
PHASES = ("prefill", "decode", "train")


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


def go_no_go_sentences(cells: pd.DataFrame) -> list[str]:
    """Per phase, at the longest T where attention and at least one SSM ran: attention's
    FLOPs and latency over the SSMs' (each side's strongest backend), and how much of the
    FLOP saving became speed (latency ratio / FLOP ratio)."""
    from ssmbench.plots import go_no_go_table

    table = go_no_go_table(cells)
    sentences = []
    for phase in [p for p in PHASES if p in set(table.phase)]:
        rows = table[table.phase == phase]
        rows = rows[rows.seq_len == rows.seq_len.max()]
        backends = ", ".join(
            sorted(
                {
                    f"{a} vs {s}"
                    for a, s in zip(rows.attention_backend, rows.ssm_backend, strict=True)
                }
            )
        )
        text = (
            f"Go/no-go, {phase} at T = {int(rows.seq_len.iloc[0])} ({backends}): attention "
            f"takes {_span(rows.latency_ratio)}x the time of each SSM"
        )
        flops = rows[rows.flop_ratio.notna() & (rows.flop_ratio > 0)]
        if not flops.empty:
            converted = flops.latency_ratio / flops.flop_ratio
            text += (
                f" for {_span(flops.flop_ratio)}x the FLOPs; latency ratio over FLOP ratio "
                f"{_span(converted)} (1.00 would turn the SSMs' FLOP saving fully into speed)"
            )
        sentences.append(text + ".")
    return sentences


def claims_sentence(claims: pd.DataFrame) -> str:
    if claims.empty:
        return "No published claim was checked."
    counts = claims.verdict.value_counts()
    parts = [f"{int(n)} {verdict}" for verdict, n in counts.items()]
    return f"Of {_count(len(claims), 'published claim')} checked against this run: " + (
        ", ".join(parts) + "."
    )


def verdict_rst(cells: pd.DataFrame, claims: pd.DataFrame) -> str:
    """The verdict as reStructuredText: the status sentence, then a bullet per finding."""
    points = [*go_no_go_sentences(cells), *fastest_sentences(cells), claims_sentence(claims)]
    return status_sentence(cells) + "\n\n" + "".join(f"- {p}\n" for p in points)


if "snakemake" in globals():  # run by the rule; importable by the tests
    import _src  # noqa: F401  (puts ../src on sys.path)

    from ssmbench.provenance import from_snakemake, now
    from ssmbench.scripting import logged

    with logged(snakemake):  # noqa: F821
        started = now()
        cells = pd.read_csv(snakemake.input.cells)  # noqa: F821
        claims = pd.read_csv(snakemake.input.claims)  # noqa: F821
        out = snakemake.output.rst  # noqa: F821
        with open(out, "w") as f:
            f.write(verdict_rst(cells, claims))
        from ssmbench.plots import go_no_go_table

        table = snakemake.output.go_no_go  # noqa: F821
        go_no_go_table(cells).to_csv(table, index=False, float_format="%.4g")
        from_snakemake(snakemake, outputs=[out, table], started=started)  # noqa: F821
