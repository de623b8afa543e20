"""The one visual vocabulary of every figure: a colour per family, a line style per backend,
a marker per status and per phase, a colour per operator bucket, a hatch per memory part.

Constants only (no matplotlib import), so a table or a test can name them cheaply.
"""

from __future__ import annotations

FAMILY_COLORS = {
    "attention": "#d62728",
    "mamba": "#1f77b4",
    "mamba2": "#2ca02c",
    "mamba3": "#17becf",
    "s4d": "#9467bd",
    "deltanet": "#ff7f0e",
    "hybrid": "#8c564b",
}
BACKEND_STYLES = {
    "naive": dict(linestyle=":", marker="o"),
    "torch": dict(linestyle="-", marker="s"),
    "torch-mixed": dict(linestyle="-", marker="h"),
    "compile": dict(linestyle="--", marker="^"),
    "fused": dict(linestyle="-", marker="D", linewidth=2.2),
    "torch-graph": dict(linestyle="-.", marker="v"),
    "fused-graph": dict(linestyle="-.", marker="P"),
}
DEFAULT_STYLE = dict(linestyle="-", marker=".")  # a backend BACKEND_STYLES does not name
# Within a family, the models of an imported run (their own names, ``family`` column) are
# told apart by marker, in this order.
MODEL_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")
STATUS_MARKERS = {
    "oom": "X",
    "timeout": "$T$",
    "unavailable": "$U$",
    "failed": "$F$",
    "not_run": "$N$",  # a budgeted run never reached the cell
}
PHASE_MARKERS = {"prefill": "o", "decode": "s", "train": "^"}
# The three floors under a cell's time (ssmbench.floors), greys from dark to light.
FLOOR_STYLES = {
    "dispatch": dict(color="0.2", linestyle="-.", linewidth=1.1),
    "bandwidth": dict(color="0.45", linestyle="--", linewidth=1.1),
    "compute": dict(color="0.65", linestyle=(0, (1, 1.5)), linewidth=1.3),
}
FLAGGED_COLOR = "#e41a1c"  # the ring round a cell measured below one of its floors
# Operator buckets of the ops table, in the one order every figure stacks and lists them.
BUCKET_COLORS = {
    "gemm": "#4e79a7",
    "attention": "#e15759",
    "ssm_scan": "#59a14f",
    "convolution": "#edc948",
    "normalization": "#b07aa1",
    "elementwise": "#76b7b2",
    "other": "#bab0ac",
}
# The parts of a cell's peak memory, bottom to top of a stacked bar: (column, label, hatch, alpha).
MEMORY_PARTS = (
    ("weights_bytes", "weights", "", 0.95),
    ("cache_bytes", "state / KV cache", "//", 0.6),
    ("activations_bytes", "activations", "..", 0.3),
)
# A claim's verdict, in the claims figure.
VERDICT_COLORS = {"reproduced": "#2ca02c", "contradicted": "#d62728", "not comparable here": "0.5"}


def color(family: str) -> str:
    """The colour of ``family`` (black for one FAMILY_COLORS does not name); a named
    variant of a family's block (``ssmbench.registry.VARIANTS``) its family's, darker."""
    from matplotlib.colors import to_hex, to_rgb

    from ssmbench.registry import VARIANTS

    if family in VARIANTS:
        return to_hex([0.6 * c for c in to_rgb(color(VARIANTS[family].family))])
    return FAMILY_COLORS.get(family, "black")


def line_style(family: str, backend: str) -> dict:
    """Keyword arguments of ``ax.plot`` for a line of ``family`` at ``backend``."""
    style = dict(BACKEND_STYLES.get(backend, DEFAULT_STYLE))
    return dict(color=color(family), markersize=4, **style)
