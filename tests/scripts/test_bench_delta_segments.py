"""scripts/bench_delta_segments.py: a small run prints each segment size's median and the
first size over each other one inside its interval, leaves the operator's segment size as
it found it, and refuses a negative size.  No timing is asserted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench_delta_segments.py"
SMALL = ["--seq-len", "192", "--rounds", "3", "--warmup", "0", "--threads", "1"]
RATIO = re.compile(r"1 MiB / all chunks = (?P<r>[\d.]+) \[(?P<lo>[\d.]+), (?P<hi>[\d.]+)\]")


def test_a_small_run_prints_each_size_and_the_ratio_in_its_interval():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *SMALL, "--mib", "1", "0"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("T=192")]
    assert "1 MiB:" in line and "all chunks:" in line
    m = RATIO.search(line)
    assert m and float(m["lo"]) <= float(m["r"]) <= float(m["hi"]), line


def test_the_operator_keeps_its_segment_size_after_a_run(monkeypatch):
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import bench_delta_segments
    finally:
        sys.path.remove(str(SCRIPT.parent))
    from ssmbench.models import deltanet

    before = deltanet._CPU_SEGMENT_BYTES
    bench_delta_segments.main([*SMALL, "--seq-len", "64", "--mib", "1", "2"])
    assert deltanet._CPU_SEGMENT_BYTES == before


def test_a_negative_size_is_a_usage_error():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--mib", "-1"], capture_output=True, text=True,
        timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 2 and "--mib: sizes are >= 0" in done.stderr
