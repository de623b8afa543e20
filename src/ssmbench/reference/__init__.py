"""NumPy float64 ground truth for the core sequence operators.

Plain and slow on purpose: every operator loops over time one token at a time, in
float64, with no vectorisation tricks, so that it can be read against the paper.
Names, argument order and layouts match :mod:`ssmbench.ops`; inputs may be NumPy
arrays of any float dtype (they are upcast to float64), outputs are float64.

No torch here: the references must run where only NumPy is installed.
"""

from __future__ import annotations

from ssmbench.reference.attention import attention
from ssmbench.reference.deltanet import delta_rule
from ssmbench.reference.mamba import selective_scan
from ssmbench.reference.mamba2 import ssd
from ssmbench.reference.mamba3 import mamba3
from ssmbench.reference.s4d import s4d

__all__ = ["attention", "delta_rule", "mamba3", "s4d", "selective_scan", "ssd"]
