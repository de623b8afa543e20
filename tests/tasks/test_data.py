"""The quality axis's data: the synthetic tasks' semantics, their refusals, and the IMDb
loader on the shipped tiny sample (tests/data/imdb-tiny, both layouts)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ssmbench.tasks.base import IGNORE, PAD, DataUnavailable
from ssmbench.tasks.data import GENERATORS, make
from ssmbench.tasks.imdb import UNK, load_imdb

TINY = Path(__file__).parents[1] / "data" / "imdb-tiny"

# The case study's splits (its configs' data blocks), one per generator
STUDY = {
    "parity": {"seq_len": 128},
    "selective_copy": {"seq_len": 64, "min_pairs": 3, "max_pairs": 5},
    "exact_copy": {"max_len": 32},
}


# --- parity ---------------------------------------------------------------------------


def test_parity_targets_are_the_running_xor_scored_everywhere():
    data = make("parity", "train", 50, seed=0, seq_len=37)
    assert data.inputs.shape == data.targets.shape == (50, 37)
    assert data.inputs.dtype == data.targets.dtype == np.int64
    assert set(np.unique(data.inputs)) == {0, 1}
    np.testing.assert_array_equal(data.targets, np.cumsum(data.inputs, axis=1) % 2)
    assert (data.vocab_size, data.n_classes, data.kind) == (2, 2, "token")


# --- selective copy -------------------------------------------------------------------


def parse_selective(inputs, targets, vocab_size):
    """One row read back from first principles: its k, marker positions and answers,
    asserting the layout on the way."""
    (sep,) = np.flatnonzero(inputs == 2)  # exactly one separator
    k = len(inputs) - 1 - sep
    context = inputs[:sep]
    markers = np.flatnonzero(context == 1)
    assert len(markers) == k  # one marker per answer
    assert np.all(np.diff(markers) >= 2)  # never adjacent
    assert markers.max() < sep - 1  # never the context's last token
    values = np.delete(context, markers)  # noise and the marked values
    assert values.min() >= 3 and values.max() < vocab_size
    assert np.all(inputs[sep + 1 :] == PAD)
    assert np.all(targets[: sep + 1] == IGNORE)
    np.testing.assert_array_equal(targets[sep + 1 :], context[markers + 1])
    return k


@pytest.mark.parametrize(
    "seq_len, min_pairs, max_pairs, vocab_size",
    [(64, 3, 5, 20), (128, 5, 10, 20), (16, 5, 5, 7), (31, 1, 10, 4)],
    ids=["train-L64-k3..5", "test-L128-k5..10", "tight-L16-k5-V7", "tight-L31-k1..10-V4"],
)
def test_selective_copy_answers_are_the_marked_values_in_order(
    seq_len, min_pairs, max_pairs, vocab_size
):
    data = make(
        "selective_copy",
        "train",
        300,
        seed=3,
        seq_len=seq_len,
        min_pairs=min_pairs,
        max_pairs=max_pairs,
        vocab_size=vocab_size,
    )
    assert data.inputs.shape == (300, seq_len)
    ks = [parse_selective(x, y, vocab_size) for x, y in zip(data.inputs, data.targets, strict=True)]
    assert set(ks) == set(range(min_pairs, max_pairs + 1))  # every k drawn, ends included
    assert data.n_classes == data.vocab_size == vocab_size


# --- exact copy -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "split, params, sizes, width",
    [
        ("train", {"max_len": 32}, range(5, 33), 66),
        ("L32", {"length": 32}, [32], 66),
        ("L64", {"length": 64}, [64], 130),
        ("L128", {"length": 128}, [128], 258),
        ("train", {"max_len": 7, "min_len": 1, "alphabet_size": 3}, range(1, 8), 16),
    ],
    ids=["train-5..32", "L32", "L64", "L128", "train-1..7-A3"],
)
def test_exact_copy_scores_only_the_copy_and_eos(split, params, sizes, width):
    data = make("exact_copy", split, 400, seed=5, **params)
    assert data.split == split and data.inputs.shape == (400, width)
    vocab_size = 4 + params.get("alphabet_size", 26)
    assert data.vocab_size == data.n_classes == vocab_size
    seen = set()
    for x, y in zip(data.inputs, data.targets, strict=True):
        (sep,) = np.flatnonzero(x == 2)
        s = x[1:sep]
        seen.add(len(s))
        assert x[0] == 1 and s.min() >= 4 and s.max() < vocab_size
        np.testing.assert_array_equal(x[sep + 1 : 2 * sep], s)  # the copy, read back in
        scored = np.flatnonzero(y != IGNORE)
        np.testing.assert_array_equal(scored, np.arange(sep, 2 * sep))
        np.testing.assert_array_equal(y[scored], [*s, 3])  # s, then eos
        assert np.all(x[2 * sep :] == PAD)  # padding, and nothing scored there
    assert seen == set(sizes)


# --- seeds ----------------------------------------------------------------------------


@pytest.mark.parametrize("task", GENERATORS)
def test_a_seed_fixes_the_split_and_another_seed_or_split_changes_it(task):
    params = STUDY[task]
    first = make(task, "train", np.int64(64), seed=np.int64(42), **params)  # numpy ints too
    again = make(task, "train", 64, seed=42, **params)
    np.testing.assert_array_equal(first.inputs, again.inputs)
    np.testing.assert_array_equal(first.targets, again.targets)
    assert not np.array_equal(first.inputs, make(task, "train", 64, seed=43, **params).inputs)
    if task != "exact_copy":  # exact_copy's splits are named by their strings' length
        # the config's one data seed for train and test: two draws, not one set twice
        assert not np.array_equal(first.inputs, make(task, "test", 64, seed=42, **params).inputs)


# --- refusals -------------------------------------------------------------------------


def refusal(id, task, split, params, message, n=8):
    return pytest.param(task, split, n, params, message, id=id)


@pytest.mark.parametrize(
    "task, split, n, params, message",
    [
        refusal("unknown-task", "copy", "train", {}, "unknown task 'copy': the tasks are parity"),
        refusal("n-0", "parity", "train", {}, "parity: n=0 must be an integer >= 1", n=0),
        refusal("seq_len-0", "parity", "train", {"seq_len": 0}, "parity: seq_len=0 must be >= 1"),
        refusal(
            "unknown-param",
            "parity",
            "train",
            {"seq_length": 64},
            "parity: unknown parameter seq_length; it takes seq_len",
        ),
        refusal(
            "min>max",
            "selective_copy",
            "train",
            {"seq_len": 64, "min_pairs": 6, "max_pairs": 5},
            "selective_copy: min_pairs=6 exceeds max_pairs=5",
        ),
        refusal(
            "seq_len-short",
            "selective_copy",
            "train",
            {"seq_len": 15, "min_pairs": 3, "max_pairs": 5},
            "selective_copy: seq_len=15 cannot hold max_pairs=5 pairs",
        ),
        refusal(
            "missing-param",
            "selective_copy",
            "train",
            {"seq_len": 64, "max_pairs": 5},
            "selective_copy: missing parameter min_pairs",
        ),
        refusal("n-float", "parity", "train", {}, "parity: n=2.5 must be an integer", n=2.5),
        refusal("split-empty", "parity", "", {}, "parity: split='' must be a name"),
        refusal(
            "min_pairs-0",
            "selective_copy",
            "train",
            {"seq_len": 64, "min_pairs": 0, "max_pairs": 5},
            "selective_copy: min_pairs=0 must be >= 1",
        ),
        refusal(
            "no-values",
            "selective_copy",
            "train",
            {"seq_len": 64, "min_pairs": 3, "max_pairs": 5, "vocab_size": 3},
            "selective_copy: vocab_size=3 must be >= 4",
        ),
        refusal("length<min", "exact_copy", "L3", {"length": 3}, "length=3 is below min_len=5"),
        refusal("max<min", "exact_copy", "train", {"max_len": 4}, "max_len=4 is below min_len=5"),
        refusal(
            "neither", "exact_copy", "train", {}, "length=None with max_len=None: give exactly one"
        ),
        refusal(
            "both",
            "exact_copy",
            "train",
            {"length": 64, "max_len": 32},
            "exact_copy: length=64 with max_len=32: give exactly one",
        ),
        refusal(
            "split-mismatch",
            "exact_copy",
            "test",
            {"length": 64},
            "exact_copy: split='test' does not match its strings (split 'L64')",
        ),
        refusal(
            "seed-negative",
            "exact_copy",
            "train",
            {"max_len": 32, "seed": -1},
            "exact_copy: seed=-1 must be an integer >= 0",
        ),
    ],
)
def test_bad_parameters_are_refused_naming_them(task, split, n, params, message):
    params = {"seed": 0, **params}
    with pytest.raises(ValueError) as raised:
        make(task, split, n, **params)
    assert message in str(raised.value)


# --- IMDb -----------------------------------------------------------------------------

ACL, PARQUET = TINY, TINY / "parquet"  # TINY holds aclImdb/ (and parquet/, two levels down)


def test_tiny_sample_parquet_is_what_make_py_writes(tmp_path):
    """make.py's output is committed: regenerate it and compare the tables."""
    import runpy

    script = TINY / "make.py"
    copy = tmp_path / "imdb-tiny"
    copy.mkdir()
    (copy / "make.py").write_text(script.read_text())
    (copy / "aclImdb").symlink_to(TINY / "aclImdb")
    runpy.run_path(str(copy / "make.py"), run_name="__main__")
    for split in ("train", "test"):
        name = f"plain_text/{split}-00000-of-00001.parquet"
        pd.testing.assert_frame_equal(
            pd.read_parquet(copy / "parquet" / name), pd.read_parquet(PARQUET / name)
        )


@pytest.mark.parametrize("max_len", [4, 64])
def test_both_layouts_give_the_same_arrays(max_len):
    acl_train, acl_vocab = load_imdb(ACL, "train", max_len=max_len)
    pq_train, pq_vocab = load_imdb(PARQUET, "train", max_len=max_len)
    assert acl_vocab == pq_vocab
    for ours, theirs in [
        (acl_train, pq_train),
        (
            load_imdb(ACL, "test", max_len=max_len, vocab=acl_vocab)[0],
            load_imdb(PARQUET, "test", max_len=max_len, vocab=acl_vocab)[0],
        ),
        (acl_train, load_imdb(ACL / "aclImdb", "train", max_len=max_len)[0]),  # root = aclImdb
    ]:
        np.testing.assert_array_equal(ours.inputs, theirs.inputs)
        np.testing.assert_array_equal(ours.targets, theirs.targets)
    assert acl_train.inputs.shape == (6, max_len)
    assert sorted(acl_train.targets.tolist()) == [0, 0, 0, 1, 1, 1]
    assert (acl_train.kind, acl_train.n_classes) == ("sequence", 2)


def decode(row, vocab):
    words = {i: word for word, i in vocab.items()} | {1: "<unk>"}
    return [words[i] for i in row if i != PAD]


def test_vocab_comes_from_train_only_and_test_words_outside_it_are_unk():
    train, vocab = load_imdb(ACL, "train")
    test, test_vocab = load_imdb(ACL, "test")  # vocab=None on test: built from train
    assert test_vocab == vocab and "zeppelin" not in vocab
    (row,) = [r for r in test.inputs if decode(r, vocab)[:2] == ["the", "<unk>"]]
    assert decode(row, vocab) == ["the", "<unk>", "<unk>", "<unk>", "is", "<unk>", "it"]
    assert test.vocab_size == train.vocab_size == len(vocab) + 2
    assert train.inputs.max() < train.vocab_size and UNK not in train.inputs


def test_tokens_truncation_and_padding():
    """The first train review: <br />, capitals, apostrophes and digits tokenised, then cut
    at max_len or padded with PAD to it."""
    words = "a warm funny film the cast is great and the script is sharp i'd watch it again in"
    words = words.split() + ["2024"]
    full, vocab = load_imdb(ACL, "train", max_len=25)
    (row,) = [r for r in full.inputs if decode(r, vocab)[:2] == ["a", "warm"]]
    assert decode(row, vocab) == words
    np.testing.assert_array_equal(row[len(words) :], PAD)
    short, _ = load_imdb(ACL, "train", max_len=5)
    np.testing.assert_array_equal(short.inputs, full.inputs[:, :5])


def test_vocab_keeps_the_most_frequent_words_ties_alphabetical(tmp_path):
    folder = tmp_path / "plain_text"
    folder.mkdir()
    texts = ["b a", "a c", "c b d", "d e"]  # a b c d twice, e once
    pd.DataFrame({"text": texts, "label": [0, 1, 0, 1]}).to_parquet(folder / "train-0.parquet")
    _, vocab = load_imdb(tmp_path, "train", max_features=5)
    assert vocab == {"a": 2, "b": 3, "c": 4}


def test_subset_is_a_seeded_sample_of_the_split():
    full, vocab = load_imdb(ACL, "train")
    picked = load_imdb(ACL, "train", vocab=vocab, subset=3, seed=42)[0]
    assert len(picked) == 3
    rows = {tuple(r) for r in full.inputs}
    assert all(tuple(r) in rows for r in picked.inputs)
    np.testing.assert_array_equal(
        picked.inputs, load_imdb(ACL, "train", vocab=vocab, subset=3, seed=42)[0].inputs
    )
    other = load_imdb(ACL, "train", vocab=vocab, subset=3, seed=1)[0]
    assert not np.array_equal(picked.inputs, other.inputs)
    with pytest.raises(ValueError, match=r"subset=7 outside 1 \.\. 6 \(train rows\)"):
        load_imdb(ACL, "train", subset=7)


def test_no_data_is_unavailable_naming_the_folder_and_both_layouts(tmp_path):
    with pytest.raises(DataUnavailable) as raised:
        load_imdb(tmp_path, "train")
    message = str(raised.value)
    assert "\n" not in message
    assert f"under {tmp_path}:" in message
    assert f"{tmp_path}/aclImdb/train/{{pos,neg}}/<id>_<rating>.txt" in message
    assert "train-*.parquet with columns text and label" in message
    assert "https://ai.stanford.edu/~amaas/data/sentiment/" in message


def write_parquet(root: Path, split: str = "train", **columns) -> Path:
    (root / "plain_text").mkdir(exist_ok=True)
    path = root / "plain_text" / f"{split}-00000-of-00001.parquet"
    pd.DataFrame(columns).to_parquet(path)
    return path


@pytest.mark.parametrize(
    "columns, message",
    [
        ({"text": ["good", "bad"], "label": [1, -1]}, "label [-1] outside {0, 1}"),
        ({"text": ["good", "bad"], "label": [1, 2]}, "label [2] outside {0, 1}"),
        ({"text": ["good", "bad"], "stars": [9, 2]}, "no column label (has text, stars)"),
        ({"text": [None, "bad"], "label": [1, 0]}, "column text holds a value that is not"),
        ({"text": pd.Series([], dtype=str), "label": pd.Series([], dtype="int64")}, "no rows"),
    ],
    ids=["label--1", "label-2", "no-label-column", "null-text", "empty"],
)
def test_a_broken_parquet_is_refused_naming_the_file(tmp_path, columns, message):
    path = write_parquet(tmp_path, **columns)
    with pytest.raises(ValueError) as raised:
        load_imdb(tmp_path, "train")
    assert f"imdb: {path}: {message}" in str(raised.value)


def test_a_file_that_is_not_parquet_is_refused_naming_it(tmp_path):
    path = tmp_path / "train-00000-of-00001.parquet"
    path.write_text("not parquet")
    with pytest.raises(ValueError, match=f"imdb: {path}: not a readable parquet file"):
        load_imdb(tmp_path, "train")


def test_an_acl_split_without_a_label_folder_is_refused_naming_it(tmp_path):
    pos = tmp_path / "aclImdb" / "train" / "pos"
    pos.mkdir(parents=True)
    (pos / "0_9.txt").write_text("good")
    with pytest.raises(ValueError) as raised:
        load_imdb(tmp_path, "train")
    assert f"imdb: {tmp_path}/aclImdb/train/neg: no reviews (*.txt)" in str(raised.value)


def test_two_copies_of_the_parquet_split_are_refused(tmp_path):
    write_parquet(tmp_path, text=["good"], label=[1])
    (tmp_path / "copy").mkdir()
    pd.DataFrame({"text": ["good"], "label": [1]}).to_parquet(tmp_path / "copy" / "train-0.parquet")
    with pytest.raises(ValueError, match="train parquet files in more than one folder"):
        load_imdb(tmp_path, "train")
