"""Compatibility: the figures moved to :mod:`ssmbench.figures` (drawing) and
:mod:`ssmbench.analysis` (ratios).  Import from there; this module re-exports the names
older callers used and goes once none is left: ssmbench.analysis (its lazy imports of
``_CELL_NUMERIC``, ``_CELL_TEXT``, ``_filter``, ``_with_columns``, now
``ssmbench.figures.data``'s CELL_NUMERIC, CELL_TEXT, select, with_columns), and
tests/test_config.py, test_records.py and test_ssm_scope.py."""

from ssmbench.analysis import (  # noqa: F401
    BACKEND_TIERS,
    GRAPH_PAIRS,
    GRAPH_TARGET,
    go_no_go_table,
    graph_speedups,
    speedups_table,
)
from ssmbench.figures import *  # noqa: F403
from ssmbench.figures import FIGURES, crossovers, draw, save  # noqa: F401
from ssmbench.figures.data import CELL_NUMERIC as _CELL_NUMERIC  # noqa: F401
from ssmbench.figures.data import CELL_TEXT as _CELL_TEXT  # noqa: F401
from ssmbench.figures.data import select as _filter  # noqa: F401
from ssmbench.figures.data import with_columns as _with_columns  # noqa: F401
from ssmbench.figures.style import (  # noqa: F401
    BACKEND_STYLES,
    BUCKET_COLORS,
    FAMILY_COLORS,
    MEMORY_PARTS,
    PHASE_MARKERS,
    STATUS_MARKERS,
)
from ssmbench.figures.utilization import CACHE_RESIDENT_LABEL  # noqa: F401
