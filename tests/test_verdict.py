"""The report's verdict (scripts/verdict.py): every number in it is read off the tables."""

from __future__ import annotations

import importlib.util

import pandas as pd

from ssmbench.config import REPO

spec = importlib.util.spec_from_file_location("verdict", REPO / "scripts" / "verdict.py")
verdict = importlib.util.module_from_spec(spec)
spec.loader.exec_module(verdict)


def cell(model, backend, phase, seq_len, time_ms, flop, status="ok"):
    return dict(
        run="r",
        model=model,
        family=model,
        backend=backend,
        phase=phase,
        batch=1,
        seq_len=seq_len,
        dtype="fp32",
        status=status,
        time_ms_median=time_ms,
        flop=flop,
        energy_j=None,
    )


CELLS = pd.DataFrame(
    [
        cell("attention", "torch", "prefill", 1024, 10.0, 8e9),
        cell("attention", "naive", "prefill", 1024, 90.0, 8e9),
        cell("mamba2", "torch", "prefill", 1024, 5.0, 1e9),
        cell("s4d", "torch", "prefill", 1024, 4.0, 2e9),
        cell("attention", "torch", "prefill", 256, 1.0, 1e9),  # shorter: not the verdict's T
        cell("mamba2", "torch", "prefill", 256, 2.0, 1e8),
        cell("mamba", "fused", "prefill", 1024, None, 1e9, status="unavailable"),
    ]
)


def test_go_no_go_sentence_states_the_ratios_at_the_longest_shared_length():
    from ssmbench.analysis import go_no_go_table

    (sentence,) = verdict.go_no_go_sentences(go_no_go_table(CELLS))
    # attention / SSM: time 10/5 = 2.00 and 10/4 = 2.50; FLOPs 8 and 4; time over FLOPs
    # 2.00/8 = 0.25 and 2.50/4 = 0.625; no samples: no interval, no answer
    assert sentence.startswith(
        "Go/no-go, prefill at T = 1024, batch 1 (torch vs torch): attention over each SSM"
    )
    assert "mamba2 2.00x for 8.00x the FLOPs (0.25 of the FLOP ratio as speed)" in sentence
    assert "s4d 2.50x for 4.00x the FLOPs (0.62 of the FLOP ratio as speed)" in sentence
    assert "CI" not in sentence and "faster" not in sentence


def test_verdict_lists_status_go_no_go_fastest_backends_and_claims():
    claims = pd.DataFrame({"verdict": ["not comparable here", "reproduced", "reproduced"]})
    from ssmbench.analysis import go_no_go_table

    text = verdict.verdict_rst(CELLS, claims, go_no_go_table(CELLS))
    first, rest = text.split("\n\n", 1)
    assert first == "Run r planned 7 cells: 6 ok, 1 unavailable, 0 failed."
    points = rest.splitlines()
    assert all(p.startswith("- ") for p in points) and len(points) == 3
    assert "attention torch (10 ms at T = 1024, batch 1, 9.0x ahead of naive)" in points[1]
    assert (
        points[2]
        == "- Of 3 published claims checked against this run: 2 reproduced, 1 not comparable here."
    )
