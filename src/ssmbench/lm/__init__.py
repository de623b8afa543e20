"""Whole language models (transformers classes built from configs with random weights).

    zoo       config/models.yaml read and validated, torch-free
    build     a zoo entry as a transformers model, seeded, on any device (meta included)
    backends  hf-eager / hf-kernels / hf-static: the kernel-package isolation of hf-eager,
              which implementation each layer ran, and each backend's availability
    verify    the correctness gate before timing: tokens, logits, cache sizes

Importing this package imports neither torch nor transformers.
"""
