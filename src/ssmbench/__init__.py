"""ssm-bench: reproducible benchmarks of state-space models, attention and hybrids.

Importing the package imports neither torch nor any GPU library: the tables, figures and
provenance helpers must work on a machine that has only pandas and matplotlib
(artifact evaluation). Torch is imported by the modules that need it
(``ssmbench.ops``, ``ssmbench.models``, ``ssmbench.cell``).

Glossary of axis letters, used in every shape comment and docstring:

    b  batch
    t  time (sequence position); ``T`` is the sequence length
    s  time, a second index over the same sequence (keys in attention)
    h  heads
    d  channels: head dim in attention ``(b, t, h, d)``, inner width ``d_inner`` in Mamba-1
    p  head dim of an SSM head (Mamba-2 and later)
    n  state size per channel (``d_state``, the paper's N)
    g  groups of B/C shared by several heads (Mamba-2)
    D  model width ``d_model`` (only in prose; ``D`` as a tensor is the skip term)
    E  expanded width ``expand * d_model`` of the Mamba block (= d_inner)

Layouts: activations ``(b, t, h, p)``; SSM state ``(b, h, p, n)`` (Mamba-1: ``(b, d, n)``).
"""

__version__ = "0.1.0"
