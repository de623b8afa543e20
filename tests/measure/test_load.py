"""Was the machine ours while a cell was measured (ssmbench.measure.load)?"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from ssmbench.measure import load


def test_a_reading_says_which_witness_saw_a_loaded_machine():
    assert load.reading(1.9, 0.05, 0.0, 2.0, 2.1).loaded == ""
    busy = load.reading(3.1, 0.9, 0.0, 2.0, 2.1)
    assert busy.loaded == "other processes used 0.90 cores on average"
    stolen = load.reading(None, None, 0.3, None, None)
    assert stolen.loaded == "30% of CPU time was stolen by the hypervisor"
    slower = load.reading(None, 0.0, 0.0, 2.0, 3.0)
    assert slower.loaded == "the probe took 3 ms after against 2 ms before (+50%)"
    # a probe faster after than before is the process's own start, not load
    assert load.reading(None, 0.0, 0.0, 2.0, 1.0).loaded == ""
    both = load.reading(None, 1.0, 0.0, 2.0, 3.0).loaded
    assert both.startswith("other processes used") and "(+50%)" in both
    # no counters (not Linux) and no probe: nothing to say
    assert load.reading(None, None, None, None, None).loaded == ""


def test_the_probe_times_a_fixed_matmul():
    ms = load.probe_ms(calls=3)
    assert ms is not None and 0 < ms < 1000


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/stat")
def test_another_busy_process_is_seen_and_this_ones_own_work_is_not():
    # this process busy on a core: its own work, not someone else's load
    watch = load.LoadWatch(probe=False).start()
    end = time.monotonic() + 0.8
    while time.monotonic() < end:
        pass
    own = watch.stop()
    # a child spinning on a core for the whole window, this process idle: another's core
    spin = "import time\nend = time.monotonic() + 1.5\nwhile time.monotonic() < end: pass"
    child = subprocess.Popen([sys.executable, "-c", spin])
    try:
        time.sleep(0.2)
        watch = load.LoadWatch(probe=False).start()
        time.sleep(0.8)
        other = watch.stop()
    finally:
        child.wait()
    # whatever else the machine runs is in both windows; the child's core only in the second
    # (a bar well under the child's one core: on a host that steals time, it gets less)
    assert other.other_cpu_cores - own.other_cpu_cores > 0.3


def test_the_tables_judge_a_records_numbers_with_the_current_thresholds():
    from ssmbench import tables
    from tests.conftest import make_record, paired_record

    # the job judged 0.3 cores as load (its thresholds then); the tables do not
    old = paired_record("mamba2", 1.5, other_cpu_cores=0.3, loaded="other processes used 0.30")
    busy = paired_record("mamba2", 1.5, replicate=1, other_cpu_cores=0.9)
    rows = tables.paired_table([old, busy])
    assert rows.loaded.tolist() == ["", "other processes used 0.90 cores on average"]
    cells = tables.cells_table([make_record(other_cpu_cores=0.9, steal_share=0.1)])
    assert cells.loaded.iloc[0] == (
        "other processes used 0.90 cores on average; 10% of CPU time was stolen by the hypervisor"
    )
