"""The case study's synthetic tasks as arrays (NumPy, no torch).

Three generators, each ``fn(n, *, seed, split, **params) -> TaskData`` of kind
``"token"`` (a class per position, :data:`~ssmbench.tasks.base.IGNORE` where nothing is
scored), and :func:`make`, the one entry point that checks the parameters first:

==============  =====  =====================================  ===========================
task            vocab  input                                  scored targets
==============  =====  =====================================  ===========================
parity          2      bits                                   every prefix's XOR
selective_copy  20     noise, marker-value pairs, sep, PADs   the marked values, in order
exact_copy      30     bos s sep s                            the copy of s and eos
==============  =====  =====================================  ===========================

Shapes: ``inputs`` and ``targets`` are ``(n, L)`` int64.  Seeding: every generator draws
from ``np.random.default_rng([seed, crc32(split)])``, so a split is the same array for a
seed on every machine, and a train and a test split drawn with the config's one data
seed are different draws (with ``default_rng(seed)`` alone, parity's 1000 test rows
would be the first 1000 of its 2000 train rows).
"""

from __future__ import annotations

import inspect
import zlib
from numbers import Integral

import numpy as np

from ssmbench.tasks.base import IGNORE, PAD, TaskData


def _rng(seed: int, split: str) -> np.random.Generator:
    """The split's own stream: the seed and the split's name (crc32, stable across runs)."""
    return np.random.default_rng([seed, zlib.crc32(split.encode())])


def _require(ok: bool, task: str, name: str, value, want: str) -> None:
    """Refuse a parameter as ``<task>: <name>=<value> <want>`` (a ValueError)."""
    if not ok:
        raise ValueError(f"{task}: {name}={value!r} {want}")


def _check_n(task: str, n: int) -> None:
    _require(isinstance(n, Integral) and n >= 1, task, "n", n, "must be an integer >= 1")


# --- parity ---------------------------------------------------------------------------


def parity(n: int, *, seed: int, split: str = "train", seq_len: int = 128) -> TaskData:
    """Cumulative parity: state tracking with a two-state automaton.

    inputs: (n, seq_len) uniform bits {0, 1} (vocab 2; bit 0 shares id 0 with PAD, and
    parity has no padding).  targets[t] = inputs[0] XOR ... XOR inputs[t], scored at every
    position; n_classes 2.
    """
    _check_n("parity", n)
    _require(seq_len >= 1, "parity", "seq_len", seq_len, "must be >= 1")
    bits = _rng(seed, split).integers(0, 2, size=(n, seq_len), dtype=np.int64)
    prefix_xor = np.bitwise_xor.accumulate(bits, axis=1)
    return TaskData("parity", split, "token", bits, prefix_xor, vocab_size=2, n_classes=2)


# --- selective copy -------------------------------------------------------------------

MARKER = 1  # selective_copy: the next token is one to copy
SEPARATOR = 2  # selective_copy: the context ends, the answers follow
FIRST_VALUE = 3  # selective_copy: ids 3 .. vocab_size-1 are values (and noise)


def selective_copy(
    n: int,
    *,
    seed: int,
    split: str = "train",
    seq_len: int,
    min_pairs: int,
    max_pairs: int,
    vocab_size: int = 20,
) -> TaskData:
    """Selective copying: recall the few marked tokens among noise.

    Vocab: 0 pad, 1 marker, 2 separator, 3 .. vocab_size-1 values.  Each row draws
    k ~ uniform{min_pairs .. max_pairs} and is laid out as (length seq_len)::

        context (seq_len-1-k)                    sep   k answer slots
        v v 1 x v v 1 y v ... v                  2     0 0 ... 0      inputs
        -100 ...                                 -100  x y ...        targets

    The context is random values (noise) with k markers at random positions, each
    followed by the value to copy; no two markers are adjacent and no marker is the
    context's last token.  The answer slots' inputs are PAD and their targets are the
    k marked values in order of appearance; every other target is IGNORE.  Needs
    seq_len >= 3 * max_pairs + 1 (k pairs fill 2k of the context's seq_len-1-k).
    n_classes = vocab_size.
    """
    task = "selective_copy"
    _check_n(task, n)
    _require(vocab_size > FIRST_VALUE, task, "vocab_size", vocab_size, "must be >= 4 (one value)")
    _require(min_pairs >= 1, task, "min_pairs", min_pairs, "must be >= 1")
    _require(min_pairs <= max_pairs, task, "min_pairs", min_pairs, f"exceeds max_pairs={max_pairs}")
    _require(
        seq_len >= 3 * max_pairs + 1,
        task,
        "seq_len",
        seq_len,
        f"cannot hold max_pairs={max_pairs} pairs, a separator and the answers "
        f"(needs >= {3 * max_pairs + 1})",
    )
    rng = _rng(seed, split)
    inputs = rng.integers(FIRST_VALUE, vocab_size, size=(n, seq_len), dtype=np.int64)  # noise
    targets = np.full((n, seq_len), IGNORE, dtype=np.int64)
    n_pairs = rng.integers(min_pairs, max_pairs + 1, size=n)
    for row, target, k in zip(inputs, targets, n_pairs, strict=True):
        context = seq_len - 1 - k
        # k disjoint (marker, value) slots in the context: choose k of context-k starts
        # and shift the i-th by i, which leaves a value after every marker, so markers
        # are never adjacent and the last one sits at context-2 at the latest
        markers = np.sort(rng.choice(context - k, size=k, replace=False)) + np.arange(k)
        row[markers] = MARKER
        target[context + 1 :] = row[markers + 1]  # the marked values, in order
        row[context] = SEPARATOR
        row[context + 1 :] = PAD
    return TaskData(task, split, "token", inputs, targets, vocab_size, n_classes=vocab_size)


# --- exact copy -----------------------------------------------------------------------

BOS, SEP, EOS = 1, 2, 3  # exact_copy: ids 4 .. 4+alphabet_size-1 are letters
FIRST_LETTER = 4


def exact_copy(
    n: int,
    *,
    seed: int,
    split: str | None = None,
    length: int | None = None,
    max_len: int | None = None,
    min_len: int = 5,
    alphabet_size: int = 26,
) -> TaskData:
    """Exact copying (repeat after me): reproduce a whole string, token by token.

    Vocab: 0 pad, 1 bos, 2 sep, 3 eos, 4 .. 4+alphabet_size-1 letters (30 in all).  A
    string s of uniform letters has |s| ~ uniform{min_len .. max_len} (training, split
    "train") or |s| = length exactly (evaluation, split f"L{length}"; give one of the
    two).  The full sequence is ``bos s sep s eos``; in next-token form inputs =
    full[:-1] and targets = full[1:], where only the predictions of the answer are scored
    (target positions |s|+1 .. 2|s|+1: read sep, emit s[0], ..., read s[-1], emit eos),
    the rest IGNORE.  Rows are right-padded (inputs PAD, targets IGNORE) to 2*L_max+2,
    L_max being the split's longest string.  n_classes = vocab_size.
    """
    task = "exact_copy"
    _check_n(task, n)
    _require(alphabet_size >= 1, task, "alphabet_size", alphabet_size, "must be >= 1")
    _require(min_len >= 1, task, "min_len", min_len, "must be >= 1")
    _require(
        (length is None) != (max_len is None),
        task,
        "length",
        length,
        f"with max_len={max_len!r}: give exactly one (max_len to train, length to evaluate)",
    )
    if length is not None:
        _require(length >= min_len, task, "length", length, f"is below min_len={min_len}")
        shortest, longest, name = length, length, f"L{length}"
    else:
        _require(max_len >= min_len, task, "max_len", max_len, f"is below min_len={min_len}")
        shortest, longest, name = min_len, max_len, "train"
    split = name if split is None else split
    _require(split == name, task, "split", split, f"does not match its strings (split {name!r})")

    rng = _rng(seed, split)
    width = 2 * longest + 2  # len(bos s sep s eos) - 1 at the longest s
    inputs = np.full((n, width), PAD, dtype=np.int64)
    targets = np.full((n, width), IGNORE, dtype=np.int64)
    vocab_size = FIRST_LETTER + alphabet_size
    sizes = rng.integers(shortest, longest + 1, size=n)
    for row, target, size in zip(inputs, targets, sizes, strict=True):
        s = rng.integers(FIRST_LETTER, vocab_size, size=size, dtype=np.int64)
        full = np.concatenate([[BOS], s, [SEP], s, [EOS]])  # (2|s|+3,)
        row[: len(full) - 1] = full[:-1]
        target[size + 1 : len(full) - 1] = full[size + 2 :]  # s then eos, from sep on
    return TaskData(task, split, "token", inputs, targets, vocab_size, n_classes=vocab_size)


# --- the registry ---------------------------------------------------------------------

GENERATORS = {"parity": parity, "selective_copy": selective_copy, "exact_copy": exact_copy}


def make(task: str, split: str, n: int, *, seed: int, **params) -> TaskData:
    """The ``split`` of ``task``: ``n`` rows drawn with ``seed`` and the task's ``params``
    (the config's ``data.<split>`` block).  Refuses an unknown task, a parameter the
    task does not take, and a bad value, each a ValueError naming it."""
    if task not in GENERATORS:
        raise ValueError(f"unknown task {task!r}: the tasks are {', '.join(GENERATORS)}")
    generator = GENERATORS[task]
    signature = inspect.signature(generator).parameters
    known = [name for name in signature if name not in ("n", "seed", "split")]
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ValueError(
            f"{task}: unknown parameter {', '.join(unknown)}; it takes {', '.join(known)}"
        )
    missing = [p for p in known if signature[p].default is inspect.Parameter.empty]
    missing = [p for p in missing if p not in params]
    if missing:
        raise ValueError(f"{task}: missing parameter {', '.join(missing)}")
    _require(isinstance(split, str) and split != "", task, "split", split, "must be a name")
    _require(
        isinstance(seed, Integral) and seed >= 0, task, "seed", seed, "must be an integer >= 0"
    )
    return generator(n, seed=seed, split=split, **params)
