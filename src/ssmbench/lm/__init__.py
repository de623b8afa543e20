"""Whole language models (transformers classes built from configs with random weights).

    zoo       config/models.yaml read and validated, torch-free
    build     a zoo entry as a transformers model, seeded, on any device (meta included)
    backends  hf-eager / hf-kernels / hf-static: the kernel-package isolation of hf-eager,
              which implementation each layer ran, and each backend's availability
    static    the hf-static backend: a preallocated StaticCache, the compiled decode step
    generate  greedy generation one call at a time: prefill, decode step, the manual loop,
              transformers' generate, a decode forked per round
    cache     the cache by kind (KV, conv state, SSM state): measured, and from the config
    verify    the correctness gate before timing: tokens, logits, cache sizes
    cell      one timed cell (TTFT or TPOT, memory split, energy) and its profiled run
    record    an lm cell's record, its schema, atomic writes
    matrix    a preset's whole-model sweeps -> cells
    table     records -> tables/lm.csv and the cells view the figures read

Importing this package imports neither torch nor transformers.
"""
