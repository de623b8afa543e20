"""`snakemake --report` on a finished `ci` run: one self-contained HTML page, opened in
headless Chromium with every host unresolvable, holds every figure, the claims table and
the verdict, loads nothing from the network, and renders to a non-blank screenshot.

Chromium comes from Debian (`apt-get install -y chromium`); without it the browser checks
are skipped and say so."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ssmbench import config as sbconfig
from tests.conftest import snakemake

CI = sbconfig.plan(sbconfig.load(overrides={"preset": "ci"}))
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NO_CHROMIUM = "chromium not installed (Debian: apt-get install -y chromium)"
# A resource the page would fetch: src= on script/img/iframe/..., href= on <link>.
REMOTE = re.compile(
    r"""<(?:script|img|iframe|source|video|audio|embed)\b[^>]*\bsrc\s*=\s*["']?(https?:)?//"""
    r"""|<link\b[^>]*\bhref\s*=\s*["']?(https?:)?//"""
    r"""|@import\s+(?:url\()?["']?(https?:)?//""",
    re.IGNORECASE,
)


def check(out):
    assert out.returncode == 0, f"snakemake failed:\n{out.stdout[-3000:]}\n{out.stderr[-5000:]}"
    return out


@pytest.fixture(scope="module")
def report(ci_run) -> Path:
    """The report.html of the shared finished `ci` run (tests/conftest.py)."""
    check(snakemake(ci_run, "--report", "report.html", "--config", "preset=ci"))
    return ci_run / "report.html"


def chromium(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--no-first-run",
            "--hide-scrollbars",
            # any host name fails to resolve: nothing can leave the machine
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--virtual-time-budget=10000",  # let the page's scripts finish rendering
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_verdict_is_read_off_the_tables(report):
    tables = report.parent / "results" / "ci" / "tables"
    cells = pd.read_csv(tables / "cells.csv")
    claims = pd.read_csv(tables / "claims.csv")
    text = (tables / "verdict.rst").read_text()
    assert Path(f"{tables / 'verdict.rst'}.prov.json").is_file()
    n_ok = int((cells.status == "ok").sum())
    assert f"planned {len(cells)} cells: {n_ok} ok" in text
    for phase in sorted(set(cells.phase)):
        assert f"Fastest {phase} backend per family" in text
    assert f"Of {len(claims)} published claim" in text
    for verdict, n in claims.verdict.value_counts().items():
        assert f"{n} {verdict}" in text
    go_no_go = pd.read_csv(tables / "go_no_go.csv")
    assert {"flop_ratio", "latency_ratio", "attention_backend", "ssm_backend"} <= set(go_no_go)
    assert set(go_no_go.phase) == set(cells.phase)
    # on the landing page and as the claims table's caption
    assert report.read_text().count(f"planned {len(cells)} cells: {n_ok} ok") >= 2


def test_report_is_one_self_contained_page(report):
    html = report.read_text()
    assert report.stat().st_size > 100_000
    assert not REMOTE.findall(html), "the report loads a resource from the network"
    # the figures travel inside the page (PNG data), the captions and the verdict as text
    assert html.count("image/png") >= len(CI.figures) or html.count("iVBORw0KGgo") >= len(
        CI.figures
    )
    for figure in CI.figures:
        assert f"{figure}.png" in html, figure
    assert "claims.csv" in html and "go_no_go.csv" in html  # the two tables


@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
def test_report_renders_offline_in_chromium(report, tmp_path):
    out = chromium("--dump-dom", report.as_uri())
    assert out.returncode == 0, out.stderr[-3000:]
    dom = out.stdout
    assert "claims" in dom.lower() and "figures" in dom.lower(), dom[:2000]
    assert "ERR_NAME_NOT_RESOLVED" not in out.stderr
    shot = tmp_path / "report.png"
    out = chromium(f"--screenshot={shot}", "--window-size=1280,2000", report.as_uri())
    assert shot.is_file() and shot.stat().st_size > 0, out.stderr[-3000:]
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)[..., :3]
    colours = np.unique((pixels.reshape(-1, 3) * 255).astype(np.uint8), axis=0)
    assert len(colours) > 50, f"screenshot looks blank: {len(colours)} colours"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
