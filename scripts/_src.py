"""Make ``src/`` importable for a rule's script and the processes it starts (the papermill
kernel), so jobs run the package of this checkout even where it is not installed
(``--sdm conda`` environments carry only third-party pins).  Snakemake puts this folder on
``sys.path`` for ``script:`` jobs; a script imports this module before ``ssmbench``."""

import os
import sys

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p)
