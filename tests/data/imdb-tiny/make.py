"""Regenerate the parquet layout of the tiny IMDb sample from its aclImdb layout.

    python tests/data/imdb-tiny/make.py

The 12 reviews under aclImdb/ were written for these tests (not IMDb text), 3 pos and 3
neg per split.  This writes parquet/plain_text/{train,test}-00000-of-00001.parquet, the
layout of Hugging Face's stanfordnlp/imdb (columns text, label: 0 neg, 1 pos), with the
rows in a shuffled order, so a test that both layouts load to the same arrays also shows
that the loader's row order does not come from the files.
"""

from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
LABELS = {"neg": 0, "pos": 1}


def main() -> None:
    out = HERE / "parquet" / "plain_text"
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        rows = [
            {"text": review.read_text(encoding="utf-8"), "label": label}
            for name, label in LABELS.items()
            for review in sorted((HERE / "aclImdb" / split / name).glob("*.txt"))
        ]
        order = np.random.default_rng(0).permutation(len(rows))
        frame = pd.DataFrame([rows[i] for i in order]).astype({"label": "int64"})
        frame.to_parquet(out / f"{split}-00000-of-00001.parquet", index=False)


if __name__ == "__main__":
    main()
