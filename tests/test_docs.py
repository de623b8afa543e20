"""The docs say what the code does.

The README and every page of ``docs/`` are read as a reader would use them:

- every command they show parses: ``make`` targets exist (``make -n``), ``python -m
  ssmbench`` commands parse with the real parser (``ssmbench.__main__.parser``, nothing
  runs), ``python scripts/...`` answers ``--help``, ``bash scripts/...`` is valid bash,
  and each distinct ``snakemake`` command dry-runs in a copy of the workflow (slow);
- every path they name in backticks or links exists, every link's anchor names a
  heading, and every ``ssmbench.x.y`` name in backticks resolves;
- every column list of docs/results-schema.md is the code's, and every column of a
  shipped table is documented;
- the README stays a front door: short, linking every page, quoting the shipped verdict
  verbatim, with the figure ``scripts/readme_figure.py`` draws from the shipped table;
- every module of the package is named in ARCHITECTURE.md's library table.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from ssmbench.paths import REPO
from tests.conftest import clone, snakemake

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
README = REPO / "README.md"
ARCHITECTURE = REPO / "docs" / "ARCHITECTURE.md"
SCHEMA_PAGE = REPO / "docs" / "results-schema.md"
VERDICT = REPO / "results" / "precollected" / "cpu" / "tables" / "verdict.rst"
README_LINES = 150

# commands the docs show, by how they start (after any VAR=value assignments)
COMMAND_STARTS = ("make ", "python -m ssmbench ", "python scripts/", "bash scripts/", "snakemake ")
# a path the docs name, by its first folder (results/precollected with or without a slash)
PATH_STARTS = (
    "src/",
    "scripts/",
    "workflow/",
    "config/",
    "docs/",
    "tests/",
    "notebooks/",
    "profiles/",
    "results/precollected",
)
PLACEHOLDER = re.compile(r"[<>{}$|]|\.\.\.|…")


# --- reading the docs ---------------------------------------------------------------------

FENCE = re.compile(r"^[ \t]*```[^\n]*\n(.*?)^[ \t]*```[ \t]*$", re.S | re.M)  # may be indented
INLINE = re.compile(r"`([^`]+)`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.M)
NAME = re.compile(r"(?<![\w/.-])ssmbench(?:\.[A-Za-z_]\w*)+")


@dataclass(frozen=True)
class Found:
    """A command, path or name found in a doc, with the doc it was found in."""

    text: str
    doc: str

    def __str__(self) -> str:
        return self.text


def prose(text: str) -> str:
    """``text`` without its fenced code blocks (their lines kept blank)."""
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def inline_code(text: str) -> list[str]:
    """The inline code spans of ``text`` (outside fences), whitespace collapsed: a span
    may wrap a line."""
    return [" ".join(span.split()) for span in INLINE.findall(prose(text))]


def fenced_lines(text: str) -> list[str]:
    """The logical lines of ``text``'s fenced blocks: continuations joined, comments cut."""
    out = []
    for block in FENCE.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            out.append(" ".join(re.split(r"(?:^|\s)#", line, maxsplit=1)[0].split()))
    return [line for line in out if line]


def command_of(text: str) -> str | None:
    """The command ``text`` is, without leading VAR=value assignments, or None when it
    is not one the docs' tests check, or holds a placeholder (``...``)."""
    words = text.split()
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        words = words[1:]
    command = " ".join(words)
    if command.startswith("scripts/") and command.split()[0].endswith((".sh", ".py")):
        interpreter = "bash" if command.split()[0].endswith(".sh") else "python"
        command = f"{interpreter} {command}"
    if not command.startswith(COMMAND_STARTS) or re.search(r"\.\.\.|…", command):
        return None
    return command


def commands(path: Path) -> list[Found]:
    """Every command ``path`` shows, in fenced blocks or inline code, in order."""
    text = path.read_text()
    found = [command_of(line) for line in fenced_lines(text)]
    found += [command_of(span) for span in inline_code(text)]
    return [Found(c, path.name) for c in found if c]


def clean_token(token: str) -> str:
    return token.strip("()[],;:'\"").rstrip(".")


def named_paths(path: Path) -> list[Found]:
    """Every repository path ``path`` names in inline code, or as the target of a link
    (relative to the doc), without placeholders; ``#anchor`` kept on links."""
    text = path.read_text()
    found = []
    for span in inline_code(text):
        for token in map(clean_token, span.split()):
            if token.startswith(PATH_STARTS) and not PLACEHOLDER.search(token):
                found.append(token)
    for target in LINK.findall(prose(text)):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path.resolve()
        rel = os.path.relpath(resolved, REPO)
        found.append(f"{rel}#{anchor}" if anchor else rel)
    return [Found(p, path.name) for p in found]


def dotted_names(path: Path) -> list[Found]:
    """Every ``ssmbench.x.y`` name in ``path``'s inline code."""
    return [
        Found(n, path.name) for span in inline_code(path.read_text()) for n in NAME.findall(span)
    ]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, only letters, digits, ``_``, ``-`` and
    spaces kept, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(m.group(2)) for m in HEADING.finditer(prose(path.read_text()))}


def distinct(found: list[Found]) -> list[Found]:
    seen, out = set(), []
    for f in found:
        if f.text not in seen:
            seen.add(f.text)
            out.append(f)
    return out


COMMANDS = distinct([c for doc in DOCS for c in commands(doc)])
PATHS = distinct([p for doc in DOCS for p in named_paths(doc)])
NAMES = distinct([n for doc in DOCS for n in dotted_names(doc)])


def of_kind(start: str) -> list[Found]:
    return [c for c in COMMANDS if c.text.startswith(start)]


def short(found: Found) -> str:
    """A readable test id: the command or path, at most 60 characters."""
    text = found.text if len(found.text) <= 60 else found.text[:57] + "..."
    return text.replace(" ", "_")


# --- the extractors find what they should ---------------------------------------------------

SAMPLE = """# Page

Run `make lint` or `python -m ssmbench
  plan --preset ci`; see `src/ssmbench/stats.py`, `results/precollected/<run>/` and
[the method](methodology.md#timing); names: `ssmbench.stats.widen`, `.snakemake/ssmbench.lock`.

```bash
snakemake --cores all \\
    --config preset=ci   # a comment
SSMBENCH_SLURM_PARTITION=gpu snakemake --workflow-profile profiles/slurm
scripts/gpu_check.sh OUT lease
python -m ssmbench ...
```
"""


def test_the_extractors_read_a_page_as_a_reader_would(tmp_path):
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    page.write_text(SAMPLE)
    assert [c.text for c in commands(page)] == [
        "snakemake --cores all --config preset=ci",
        "snakemake --workflow-profile profiles/slurm",
        "bash scripts/gpu_check.sh OUT lease",
        "make lint",
        "python -m ssmbench plan --preset ci",
    ]
    paths = [p.text for p in named_paths(page)]
    assert paths[0] == "src/ssmbench/stats.py"
    assert paths[1].endswith("docs/methodology.md#timing")
    assert len(paths) == 2, paths  # the placeholder path is left out
    assert [n.text for n in dotted_names(page)] == ["ssmbench.stats.widen"]
    assert slug("The lease (`scripts/gpu_check.sh`)") == "the-lease-scriptsgpu_checksh"


def test_the_docs_show_enough_to_check():
    """An extractor that silently finds nothing would pass every test below."""
    assert len(DOCS) >= 11, [d.name for d in DOCS]
    assert len(of_kind("make ")) >= 10
    assert len(of_kind("python -m ssmbench ")) >= 8
    assert len(of_kind("python scripts/")) >= 6
    assert len(of_kind("bash scripts/")) >= 1
    assert len(of_kind("snakemake ")) >= 6
    assert len(PATHS) >= 80
    assert len(NAMES) >= 60


# --- every command parses -------------------------------------------------------------------


@pytest.mark.parametrize("found", of_kind("make "), ids=short)
def test_make_targets_exist(found):
    words = shlex.split(found.text)[1:]
    args = [w for w in words if not w.startswith("-")]
    out = subprocess.run(
        ["make", "-n", *args], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, f"{found.doc}: `{found.text}`: make -n says\n{out.stderr}"


@pytest.mark.parametrize("found", of_kind("python -m ssmbench "), ids=short)
def test_ssmbench_commands_parse(found):
    from ssmbench.__main__ import parser

    args = shlex.split(found.text)[3:]
    if len(args) == 1:  # a mention of the subcommand, not a whole command: it exists
        args.append("--help")
    said = io.StringIO()
    try:
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
            parser().parse_args(args)
    except SystemExit as e:
        if e.code != 0 or args[-1] != "--help":
            pytest.fail(f"{found.doc}: `{found.text}` does not parse:\n{said.getvalue()}")


def scripts_named(start: str) -> list[Found]:
    return distinct([Found(shlex.split(c.text)[1], c.doc) for c in of_kind(start)])


@pytest.mark.parametrize("found", scripts_named("python scripts/"), ids=short)
def test_python_scripts_answer_help(found):
    script = REPO / found.text
    assert script.is_file(), f"{found.doc}: {found.text} does not exist"
    out = subprocess.run(
        [sys.executable, str(script), "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0 and "usage" in out.stdout.lower(), out.stderr[-2000:]


@pytest.mark.parametrize("found", scripts_named("bash scripts/"), ids=short)
def test_shell_scripts_are_valid_bash(found):
    script = REPO / found.text
    assert script.is_file(), f"{found.doc}: {found.text} does not exist"
    out = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


# Snakemake commands a dry run here cannot check, by what they need.
NOT_HERE = (
    (r"--workflow-profile profiles/slurm|SSMBENCH_SLURM", "needs a SLURM cluster"),
    (r"preset=(gpu|h200|lease|lm-gpu)\b", "needs a GPU"),
    (r"import_ssm_scope=/path/", "needs a clone of SSM-Scope, not shipped"),
)


@pytest.fixture(scope="module")
def workflow_here(pristine_workflow, tmp_path_factory):
    """One copy of the workflow with every shipped run (``source=precollected`` draws
    them), for every dry run; taking ``pristine_workflow`` marks the tests ``slow``."""
    shipped = [p.name for p in (REPO / "results" / "precollected").iterdir() if p.is_dir()]
    return clone(pristine_workflow, tmp_path_factory.mktemp("docs") / "wf", shipped)


@pytest.mark.parametrize("found", of_kind("snakemake "), ids=short)
def test_snakemake_commands_dry_run(found, workflow_here):
    for pattern, why in NOT_HERE:
        if re.search(pattern, found.text):
            pytest.skip(f"`{found.text}` {why}")
    out = snakemake(workflow_here, "-n", *shlex.split(found.text)[1:])
    assert out.returncode == 0, (
        f"{found.doc}: `{found.text}` fails a dry run:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    )


# --- every path and name exists -------------------------------------------------------------


@pytest.mark.parametrize("found", PATHS, ids=short)
def test_named_paths_exist(found):
    file, _, anchor = found.text.partition("#")
    if "*" in file:
        assert list(REPO.glob(file)), f"{found.doc}: {file} matches nothing"
        return
    target = REPO / file
    assert target.exists(), f"{found.doc}: {file} does not exist"
    if anchor:
        assert target.suffix == ".md", f"{found.doc}: an anchor into {file}"
        known = anchors(target)
        assert anchor in known, f"{found.doc}: {file} has no heading #{anchor}: {sorted(known)}"


def resolve(name: str):
    """The module or attribute ``name`` names (a ValueError when neither)."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        module_name = ".".join(parts[:n])
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name and module_name.startswith(e.name):
                continue  # not a module: an attribute of a shorter one
            raise
        for attribute in parts[n:]:
            if not hasattr(obj, attribute):
                raise ValueError(f"{'.'.join(parts[:n])} has no {attribute!r}")
            obj = getattr(obj, attribute)
        return obj
    raise ValueError(f"no module {parts[0]!r}")


@pytest.mark.parametrize("found", NAMES, ids=short)
def test_ssmbench_names_resolve(found):
    try:
        resolve(found.text)
    except ValueError as e:
        pytest.fail(f"{found.doc}: `{found.text}`: {e}")


# --- the results schema is the code's -------------------------------------------------------


def documented_columns() -> dict[str, list[str]]:
    """Per ``### <table>`` section of results-schema.md, the backticked names of its
    table's first column, in order."""
    out: dict[str, list[str]] = {}
    table = None
    for line in prose(SCHEMA_PAGE.read_text()).splitlines():
        heading = re.match(r"###\s+(\S+)\s*$", line)
        if heading:
            table = heading.group(1)
            out[table] = []
        elif line.startswith("## "):
            table = None
        elif table and line.startswith("|") and not re.match(r"\|\s*(column|-)", line):
            out[table] += re.findall(r"`([^`]+)`", line.split("|")[1])
    return out


def code_columns() -> dict[str, list[str]]:
    from ssmbench import analysis, claims, compare, tables, workload
    from ssmbench.lm import table as lm_table
    from ssmbench.tasks import table as tasks_table

    return {
        "cells.csv": tables.CELL_COLUMNS
        + tables.SIZE_COLUMNS
        + ["family", "device_kind"]
        + tables.REPLICATE_COLUMNS
        + tables.FLOOR_COLUMNS,
        "samples.parquet": tables.SAMPLES_COLUMNS,
        "paired.csv": tables.PAIRED_COLUMNS,
        "pairs.csv": tables.PAIRS_COLUMNS,
        "verify.csv": list(tables.VERIFY_SCHEMA.columns),
        "ops.csv": tables.OPS_COLUMNS,
        "go_no_go.csv": analysis.GO_NO_GO_COLUMNS,
        "speedups.csv": analysis.SPEEDUP_COLUMNS,
        "claims.csv": claims.COLUMNS,
        "workload.csv": workload.WORKLOAD_COLUMNS,
        "lm.csv": lm_table.COLUMNS,
        "lm_ops.csv": tables.OPS_COLUMNS,
        "tasks.csv": tasks_table.COLUMNS,
        "task_accuracy.csv": tasks_table.FIGURE_COLUMNS,
        "quality_vs_speed.csv": tasks_table.FIGURE_COLUMNS + tasks_table.SPEED_COLUMNS,
        "compare.csv": compare.COLUMNS,
    }


def test_the_schema_page_documents_every_table():
    assert sorted(documented_columns()) == sorted(code_columns())


@pytest.mark.parametrize("table", sorted(code_columns()))
def test_documented_columns_are_the_codes(table):
    documented = documented_columns().get(table, [])
    assert documented == code_columns()[table], (
        f"results-schema.md, {table}: documented but not in the code: "
        f"{[c for c in documented if c not in code_columns()[table]]}; in the code but not "
        f"documented: {[c for c in code_columns()[table] if c not in documented]}"
    )


def shipped_tables() -> list[Path]:
    root = REPO / "results" / "precollected"
    names = set(code_columns())
    return sorted(p for p in root.glob("*/tables/*") if p.name in names)


@pytest.mark.parametrize("path", shipped_tables(), ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_every_shipped_column_is_documented(path):
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        header = pq.read_schema(path).names
    else:
        header = path.read_text().splitlines()[0].split(",")
    missing = [c for c in header if c not in documented_columns()[path.name]]
    assert not missing, f"{path}: columns not in results-schema.md: {missing}"


# --- the README is a front door -------------------------------------------------------------


def test_the_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_LINES, f"README.md has {len(lines)} lines"


@pytest.mark.parametrize("page", [p for p in DOCS if p != README], ids=lambda p: p.name)
def test_the_readme_links_every_page(page):
    assert f"](docs/{page.name})" in README.read_text(), f"README.md does not link {page.name}"


@pytest.mark.parametrize("page", [p for p in DOCS if p != README], ids=lambda p: p.name)
def test_every_page_starts_with_what_it_covers(page):
    lines = [line for line in page.read_text().splitlines() if line.strip()]
    assert lines[0].startswith("# "), f"{page.name} starts without a title"
    assert not lines[1].startswith(("#", "```", "-", "|", ">", "!")), (
        f"{page.name}: the title is not followed by a paragraph saying what the page covers"
    )


@pytest.mark.parametrize("doc", [README, REPO / "docs" / "development.md"], ids=lambda p: p.name)
def test_architecture_is_linked(doc):
    assert "ARCHITECTURE.md)" in doc.read_text()


def quotes(text: str) -> list[str]:
    """The block quotes of ``text``, each as one line."""
    out, current = [], []
    for line in prose(text).splitlines() + [""]:
        if line.startswith(">"):
            current.append(line[1:].strip())
        elif current:
            out.append(" ".join(" ".join(current).split()))
            current = []
    return out


def test_the_readme_quotes_the_shipped_verdict_verbatim():
    verdict = " ".join(VERDICT.read_text().split())
    quoted = quotes(README.read_text())
    assert len(quoted) == 3, quoted
    for quote in quoted:
        assert quote in verdict, f"not in {VERDICT.name}: {quote[:120]}..."


def test_the_readme_figure_is_drawn_from_the_shipped_table_without_torch(tmp_path):
    """``scripts/readme_figure.py`` in a process where torch cannot be imported draws the
    PNG the README shows, byte for byte."""
    assert "](docs/img/go_no_go.png)" in README.read_text()
    out_png = tmp_path / "go_no_go.png"
    run = (
        "import runpy, sys; sys.modules['torch'] = None; "
        f"sys.argv = ['readme_figure.py', '--out', {str(out_png)!r}]; "
        f"sys.path.insert(0, {str(REPO / 'scripts')!r}); "
        f"runpy.run_path({str(REPO / 'scripts' / 'readme_figure.py')!r}, run_name='__main__')"
    )
    out = subprocess.run(
        [sys.executable, "-c", run], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out_png.read_bytes() == (REPO / "docs" / "img" / "go_no_go.png").read_bytes(), (
        "docs/img/go_no_go.png is not what the shipped table draws: "
        "run python scripts/readme_figure.py"
    )


# --- ARCHITECTURE names every module ----------------------------------------------------------


def library_table() -> list[str]:
    """The units ARCHITECTURE.md's library table names, bottom to top (as
    scripts/structure.py reads them)."""
    text = ARCHITECTURE.read_text()
    rows = text[text.index("The library, bottom to top") :].splitlines()[1:]
    order = []
    for line in rows:
        if line.startswith("|") and not line.startswith(("|--", "| module")):
            order += [n.rstrip("/") for n in re.findall(r"`([a-z_./]+)`", line.split("|")[1])]
        elif order and not line.startswith("|"):
            break
    return order


def test_architecture_names_every_module():
    listed = set(library_table())
    src = REPO / "src" / "ssmbench"
    unnamed = set()
    for path in src.rglob("*.py"):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts and not any("/".join(parts[:n]) in listed for n in range(len(parts), 0, -1)):
            unnamed.add(parts[0])
    assert not unnamed, f"ARCHITECTURE.md's library table does not name {sorted(unnamed)}"
    for unit in listed:
        assert (src / f"{unit}.py").is_file() or (src / unit).is_dir(), (
            f"ARCHITECTURE.md's library table names {unit}, which is no module"
        )
