"""The cross-device figures from shipped tables, without torch: the shipped cpu run beside
SSM-Scope's imported RTX 4090 and Jetson runs (the anchors' clone, skipped where absent),
drawn where their family, phase, batch and T meet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ssmbench.paths import REPO
from tests.conftest import ANCHORS

SSM_SCOPE = Path(os.environ.get("SSM_SCOPE_DIR") or ANCHORS / "ssm-scope")

# Runs in a process where `import torch` fails: the artifact-evaluation path's promise.
SCRIPT = textwrap.dedent(
    """
    import json, sys
    from ssmbench import compare, figures
    from ssmbench.importers.ssm_scope import import_ssm_scope

    clone, shipped, out = sys.argv[1:4]
    cpu = compare.read_run("cpu", f"{shipped}/tables")
    imported = [compare.Run(run, t["cells"]) for run, t in import_ssm_scope(clone).items()]
    table = compare.compare_table([cpu, *imported])
    facts = {"torch": "torch" in sys.modules, "figures": {}}
    for name in ("latency_across_devices", "go_no_go_across_devices",
                 "utilization_across_devices"):
        fig = figures.draw(name, table)
        figures.save(fig, f"{out}/{name}.png")
        facts["figures"][name] = {
            "title": fig._suptitle.get_text(),
            "panels": {ax.get_title(): [list(map(float, line.get_xdata()))
                                        for line in ax.get_lines()] for ax in fig.axes},
        }
    met = table[table.meets & (table.quantity == "time_ms")]
    facts["met"] = sorted({(r.run, r.family, r.phase, int(r.seq_len)) for r in met.itertuples()})
    print(json.dumps(facts))
    """
)


@pytest.fixture(scope="module")
def drawn(tmp_path_factory) -> dict:
    if not (SSM_SCOPE / "profile_data").is_dir():
        pytest.skip(f"no SSM-Scope clone at {SSM_SCOPE} (set SSM_SCOPE_DIR)")
    out = tmp_path_factory.mktemp("compare")
    blocker = out / "no-torch"
    (blocker / "torch").mkdir(parents=True)
    (blocker / "torch" / "__init__.py").write_text("raise ImportError('torch is blocked')\n")
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(SSM_SCOPE), str(REPO / "results/precollected/cpu"),
         str(out)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker), str(REPO / "src")])},
        capture_output=True, text=True, timeout=1200,  # minutes on a loaded 2-core machine
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    facts = json.loads(result.stdout.splitlines()[-1])
    facts["out"] = out
    return facts


def test_no_torch_and_every_figure_written(drawn):
    assert drawn["torch"] is False
    for name in drawn["figures"]:
        assert (drawn["out"] / f"{name}.png").stat().st_size > 10_000


def test_the_runs_meet_where_family_phase_and_t_are_the_same(drawn):
    """The shipped cpu run times prefill at T 256-4096 and decode at 1024-65536 (batch 1),
    SSM-Scope's RTX 4090 run prefill and decode at 1024-32768 for qwen25-instruct
    (attention), falcon-h1-0.5b (hybrid) and mamba2-780m: they meet at prefill T 1024,
    2048, 4096 and decode T 1024, 4096, 16384 for those three families."""
    expected = {
        (run, family, phase, t)
        for run in ("cpu", "ssm-scope-rtx4090")
        for family in ("attention", "hybrid", "mamba2")
        for phase, ts in (("prefill", (1024, 2048, 4096)), ("decode", (1024, 4096, 16384)))
        for t in ts
    }
    assert {tuple(m) for m in drawn["met"]} == expected


def test_the_titles_say_what_did_not_meet(drawn):
    latency = drawn["figures"]["latency_across_devices"]["title"]
    assert "cpu, ssm-scope-rtx4090, ssm-scope-jetson" in latency
    for said in (
        "cpu: deltanet, mamba, mamba3, s4d (no other run has these families)",
        "cpu: train (no other run has this phase)",
        "ssm-scope-jetson: none",  # SSM-Scope published no Jetson timings
        "falcon-h1-0.5b (hybrid)",  # the whole models the imported run draws
    ):
        assert said in latency.replace("\n", " "), said
    ratio = drawn["figures"]["go_no_go_across_devices"]["title"].replace("\n", " ")
    assert "no interval: ssm-scope-rtx4090 (single measurements)" in ratio
    util = drawn["figures"]["utilization_across_devices"]["title"].replace("\n", " ")
    assert "no ceilings: ssm-scope-jetson, ssm-scope-rtx4090" in util


def test_each_panel_draws_both_runs(drawn):
    panels = drawn["figures"]["latency_across_devices"]["panels"]
    assert sorted(panels) == ["decode (batch 1)", "prefill (batch 1)"]
    # per (run, family) one line and two marker sets (shared points, this run's only)
    xs = panels["prefill (batch 1)"]
    assert len(xs) == 2 * 3 * 3
    assert [256.0, 512.0, 1024.0, 2048.0, 4096.0] in xs  # the cpu run's whole line
    assert [1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 24576.0, 32768.0] in xs  # the 4090's
