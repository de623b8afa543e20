"""The README's figure: the shipped cpu run's go/no-go, drawn from its table without torch.

    python scripts/readme_figure.py [--table results/precollected/cpu/tables/go_no_go.csv]
                                    [--out docs/img/go_no_go.png]

Reads the go/no-go table (``ssmbench.analysis.read_table``), draws it with the same
function as the workflow's ``go_no_go`` figure (``figures.draw``) and writes one PNG
(``figures.save``).  Nothing is measured and torch is never imported; rerun it when the
shipped run's tables change (``tests/test_docs.py`` compares the committed PNG with a
fresh drawing).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import _src  # noqa: F401  (puts ../src on sys.path)

from ssmbench import analysis, figures
from ssmbench.paths import REPO

TABLE = REPO / "results" / "precollected" / "cpu" / "tables" / "go_no_go.csv"
OUT = REPO / "docs" / "img" / "go_no_go.png"


def draw_readme_figure(table_path: str | Path = TABLE, out_path: str | Path = OUT) -> Path:
    """Draw the go/no-go figure of the table at ``table_path`` into the PNG ``out_path``."""
    table = analysis.read_table(table_path, analysis.GO_NO_GO_COLUMNS)
    fig = figures.draw("go_no_go", table)
    figures.save(fig, out_path)
    return Path(out_path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", default=str(TABLE), help="a go/no-go table (CSV)")
    parser.add_argument("--out", default=str(OUT), help="the PNG to write")
    args = parser.parse_args(argv)
    print(draw_readme_figure(args.table, args.out))


if __name__ == "__main__":
    main()
