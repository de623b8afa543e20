"""Make ``src/`` importable for a tool of scripts/ (``python scripts/bench_ratios.py``), so
it runs the package of this checkout even where it is not installed; a tool imports this
module before ``ssmbench``.  (The rules' scripts have their own, workflow/scripts/_src.py.)"""

import os
import sys

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
# first on the path: Snakemake's script preamble appends the main process's path (SRC
# among it) after site-packages, where an installed ssmbench of another checkout would win
if SRC in sys.path:
    sys.path.remove(SRC)
sys.path.insert(0, SRC)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p)
