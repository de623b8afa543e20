"""IMDb sentiment (Maas et al., 2011) as arrays: word ids in, one label per review out.

Reads either layout under ``root`` (the first found, in this order):

- **aclImdb**, the Stanford archive unpacked: ``root/aclImdb/{train,test}/{pos,neg}/
  <id>_<rating>.txt`` (or ``root`` is the aclImdb folder itself); the label is the folder.
- **parquet**, as the Hugging Face dataset ``stanfordnlp/imdb`` ships it:
  ``{train,test}-*.parquet`` in ``root`` or one folder below it (``root/plain_text/``),
  columns ``text`` and ``label`` (0 neg, 1 pos).

Either gives the same arrays: rows are sorted by (label, text), which neither layout's
file names nor row order can change, so shuffle before batching.  NumPy and pandas
(parquet only), no torch.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np

from ssmbench.tasks.base import PAD, DataUnavailable, TaskData

UNK = 1  # a word outside the vocabulary; words are ids 2 .. max_features-1
FIRST_WORD = 2
SPLITS = ("train", "test")
LABELS = {"neg": 0, "pos": 1}
URL = "https://ai.stanford.edu/~amaas/data/sentiment/"
_WORD = re.compile(r"[a-z0-9']+")


def tokenize(text: str) -> list[str]:
    """Lowercase, ``<br />`` (the reviews' line breaks) to a space, then the runs of
    ``[a-z0-9']``."""
    return _WORD.findall(text.lower().replace("<br />", " "))


def build_vocab(texts: list[str], max_features: int) -> dict[str, int]:
    """The ``max_features - 2`` most frequent words of ``texts`` (ties alphabetical), the
    most frequent first, as ids 2 ..; 0 (pad) and 1 (unk) are not in the dict."""
    counts = Counter(word for text in texts for word in tokenize(text))
    ranked = sorted(counts, key=lambda word: (-counts[word], word))[: max_features - FIRST_WORD]
    return {word: FIRST_WORD + i for i, word in enumerate(ranked)}


# --- the two layouts ------------------------------------------------------------------


def _acl_folder(root: Path, split: str) -> Path | None:
    """``<aclImdb>/<split>`` when the aclImdb layout holds the split, else None."""
    for acl in (root / "aclImdb", root):
        if (acl / split).is_dir() and any((acl / split / label).is_dir() for label in LABELS):
            return acl / split
    return None


def _parquet_files(root: Path, split: str) -> list[Path]:
    """The split's parquet shards in ``root`` or one folder below it, sorted; all in one
    folder (two copies of the dataset would be read twice)."""
    files = sorted([*root.glob(f"{split}-*.parquet"), *root.glob(f"*/{split}-*.parquet")])
    folders = sorted({str(f.parent) for f in files})
    if len(folders) > 1:
        raise ValueError(f"imdb: {split} parquet files in more than one folder: {folders}")
    return files


def _read_acl(folder: Path) -> tuple[list[str], list[int]]:
    texts, labels = [], []
    for name, label in LABELS.items():
        reviews = sorted((folder / name).glob("*.txt"))
        if not reviews:
            raise ValueError(f"imdb: {folder / name}: no reviews (*.txt) in the {name} folder")
        for review in reviews:
            try:
                texts.append(review.read_text(encoding="utf-8"))
            except UnicodeDecodeError as err:
                raise ValueError(f"imdb: {review}: not UTF-8 text ({err})") from err
            labels.append(label)
    return texts, labels


def _read_parquet(files: list[Path]) -> tuple[list[str], list[int]]:
    import pandas as pd  # only this layout needs it

    texts, labels = [], []
    for file in files:
        try:
            frame = pd.read_parquet(file)
        except Exception as err:  # pyarrow's errors have no common base worth naming
            raise ValueError(f"imdb: {file}: not a readable parquet file ({err})") from err
        missing = [column for column in ("text", "label") if column not in frame.columns]
        if missing:
            raise ValueError(
                f"imdb: {file}: no column {', '.join(missing)} "
                f"(has {', '.join(map(str, frame.columns))})"
            )
        bad = sorted(set(frame["label"].tolist()) - set(LABELS.values()), key=repr)
        if bad:
            raise ValueError(f"imdb: {file}: label {bad} outside {{0, 1}} (0 neg, 1 pos)")
        if not frame["text"].map(lambda text: isinstance(text, str)).all():
            raise ValueError(f"imdb: {file}: column text holds a value that is not a string")
        texts += frame["text"].tolist()
        labels += [int(label) for label in frame["label"]]
    if not texts:
        raise ValueError(f"imdb: {', '.join(map(str, files))}: no rows")
    return texts, labels


def has_data(root: str | Path) -> bool:
    """Whether either layout holds a training split under ``root`` (a cheap look, for the
    plan's cost; reading it may still find it broken)."""
    root = Path(root)
    try:
        return _acl_folder(root, "train") is not None or bool(_parquet_files(root, "train"))
    except ValueError:
        return True  # there, but broken: the job will say how


def read_split(root: str | Path, split: str) -> tuple[list[str], list[int]]:
    """The split's reviews and labels (0 neg, 1 pos), sorted by (label, text).

    Raises DataUnavailable (one line: the folder, both layouts, where to get them) when
    neither layout holds the split, and ValueError naming the file when one is broken.
    """
    if split not in SPLITS:
        raise ValueError(f"imdb: split {split!r} is not one of {SPLITS}")
    root = Path(root)
    folder = _acl_folder(root, split)
    if folder is not None:
        texts, labels = _read_acl(folder)
    elif files := _parquet_files(root, split):
        texts, labels = _read_parquet(files)
    else:
        raise DataUnavailable(
            f"imdb: no {split} split under {root}: unpack aclImdb_v1.tar.gz from {URL} "
            f"there (aclImdb layout: {root}/aclImdb/{split}/{{pos,neg}}/<id>_<rating>.txt), "
            f"or put the parquet layout there ({split}-*.parquet with columns text and "
            f"label, 0 neg 1 pos, in {root} or one folder below it, e.g. "
            f"{root}/plain_text/ as Hugging Face's stanfordnlp/imdb ships it)"
        )
    rows = sorted(zip(labels, texts, strict=True))
    return [text for _, text in rows], [label for label, _ in rows]


# --- the task -------------------------------------------------------------------------


def encode(texts: list[str], vocab: dict[str, int], max_len: int) -> np.ndarray:
    """(len(texts), max_len) int64: each text's first max_len word ids (UNK outside the
    vocabulary), right-padded with PAD."""
    ids = np.full((len(texts), max_len), PAD, dtype=np.int64)
    for row, text in zip(ids, texts, strict=True):
        words = tokenize(text)[:max_len]
        row[: len(words)] = [vocab.get(word, UNK) for word in words]
    return ids


def load_imdb(
    root: str | Path,
    split: str,
    *,
    max_features: int = 20000,
    max_len: int = 512,
    vocab: dict[str, int] | None = None,
    subset: int | None = None,
    seed: int = 42,
) -> tuple[TaskData, dict[str, int]]:
    """IMDb's ``split`` ("train" or "test") as a TaskData of kind "sequence", and its
    vocabulary.

    inputs: (N, max_len) word ids (0 pad, 1 unk, 2 .. the vocabulary), each review's
    first max_len words right-padded; targets: (N,) labels, 0 neg, 1 pos; n_classes 2,
    vocab_size one past the largest id.  The vocabulary comes from the TRAIN split only,
    all of it (not the subset): built here from ``max_features`` when ``vocab`` is None
    (on "test", by reading this root's train split), else ``vocab`` as given (pass the
    train split's when loading test).  ``subset``: that many rows drawn without
    replacement with ``default_rng(seed)``, kept in their sorted order.
    """
    if max_len < 1:
        raise ValueError(f"imdb: max_len={max_len!r} must be >= 1")
    if vocab is None and max_features <= FIRST_WORD:
        raise ValueError(f"imdb: max_features={max_features!r} must be >= 3 (pad, unk, a word)")
    texts, labels = read_split(root, split)
    if vocab is None:
        vocab = build_vocab(
            texts if split == "train" else read_split(root, "train")[0], max_features
        )
    if subset is not None:
        if not 1 <= subset <= len(texts):
            raise ValueError(f"imdb: subset={subset!r} outside 1 .. {len(texts)} ({split} rows)")
        keep = np.sort(np.random.default_rng(seed).choice(len(texts), size=subset, replace=False))
        texts, labels = [texts[i] for i in keep], [labels[i] for i in keep]
    data = TaskData(
        "imdb",
        split,
        "sequence",
        encode(texts, vocab, max_len),
        np.asarray(labels, dtype=np.int64),
        vocab_size=max(vocab.values(), default=UNK) + 1,
        n_classes=2,
    )
    return data, vocab
