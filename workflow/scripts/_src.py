"""Make ``src/`` importable for a rule's script and the processes it starts (the papermill
kernel), so jobs run the package of this checkout even where it is not installed
(``--sdm conda`` environments carry only third-party pins).  Snakemake puts this folder on
``sys.path`` for ``script:`` jobs; a script imports this module before ``ssmbench``."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))  # workflow/scripts/
SRC = os.path.join(os.path.dirname(os.path.dirname(HERE)), "src")
# first on the path: Snakemake's script preamble appends the main process's path (SRC
# among it) after site-packages, where an installed ssmbench of another checkout would win
if SRC in sys.path:
    sys.path.remove(SRC)
sys.path.insert(0, SRC)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p)
