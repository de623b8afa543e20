"""Bad input is refused before any job: the message names the key and the value, and
nothing is written.

One case per way a config can be wrong.  Each is tried twice: through ``plan()`` (the
config file's values, with the ``--config`` entries parsed by Snakemake's own parser), and
through the workflow itself, in a copy whose config/config.yaml is the bad config, where
Snakemake must stop with the same message and leave every file as it was.
"""

from __future__ import annotations

import copy
import math
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from snakemake.cli import parse_config

from ssmbench import config as sbconfig
from ssmbench.scripting import copy_workflow
from tests.conftest import snakemake

# every case starts from the shipped config with the ci preset (preset: auto would pick
# the gpu preset on a machine with a driver)
BASE = {**sbconfig.load(), "preset": "ci"}


@dataclass(frozen=True)
class Bad:
    """A bad config: ``config`` as config/config.yaml holds it, ``cli`` the ``--config``
    entries as typed; the refusal must name ``key`` and show ``value``."""

    config: dict
    key: str
    value: str
    cli: tuple[str, ...] = ()

    def merged(self) -> dict:
        """The config Snakemake hands the Snakefile: the file's, then ``--config``'s keys."""
        return {**self.config, **parse_config(list(self.cli))}


CASES = {}


def case(make):
    """Register ``make`` (a function returning a :class:`Bad`) under its name."""
    CASES[make.__name__] = make
    return make


def base() -> dict:
    return copy.deepcopy(BASE)


def ci(c: dict) -> dict:
    return c["presets"]["ci"]


def sweep(c: dict, index: int = 0) -> dict:
    return ci(c)["sweeps"][index]


def with_sweep(key, values, where: str) -> Bad:
    c = base()
    sweep(c)[key] = values
    return Bad(c, f"presets.ci.sweeps[0].{where}", repr(values[-1]) if values else "[]")


def with_preset(key, value) -> Bad:
    c = base()
    ci(c)[key] = value
    return Bad(c, f"presets.ci.{key}", repr(value))


def with_timing(value_key: str, **timing) -> Bad:
    c = base()
    ci(c)["timing"].update(timing)
    return Bad(c, f"presets.ci.timing.{value_key}", repr(timing[value_key]))


def with_cli(key: str, value: str, shown: str | None = None, also: tuple[str, ...] = ()) -> Bad:
    """``--config key=value`` (and the entries ``also``); the message shows ``shown``."""
    return Bad(base(), key, shown or value, (f"{key}={value}", *also))


# -- the schema: names, enums, ranges ---------------------------------------------------


@case
def unknown_preset():
    return with_cli("preset", "tpu", "'tpu'")


@case
def unknown_model():
    return with_sweep("models", ["mamba", "rwkv"], "models[1]")


@case
def unknown_backend():
    return with_sweep("backends", ["cuda-magic"], "backends[0]")


@case
def unknown_cache():
    c = base()
    sweep(c, 1)["cache"] = "zeros"
    return Bad(c, "presets.ci.sweeps[1].cache", "'zeros'")


@case
def unknown_host_allocator():
    return with_timing("host_allocator", host_allocator="jemalloc")


@case
def unknown_source():
    return with_cli("source", "cloud", "'cloud'")


@case
def unknown_partial_reason():
    return with_cli("partial", "maybe", "'maybe'")


@case
def unknown_top_level_key():
    return Bad({**base(), "prest": "cpu"}, "<top level>", "'prest'")


@case
def unknown_figure():
    c = base()
    c["figures"]["pretty_picture"] = {}
    return Bad(c, "figures", "'pretty_picture'")


@case
def negative_length():
    return with_sweep("seq_len", [32, -4], "seq_len[1]")


@case
def length_as_text():
    return with_sweep("seq_len", ["64"], "seq_len[0]")


@case
def length_as_bool():
    return with_sweep("seq_len", [True], "seq_len[0]")


@case
def empty_sweep_axis():
    return with_sweep("batch", [], "batch")


@case
def no_sweeps():
    c = base()
    ci(c)["sweeps"] = []
    return Bad(c, "presets.ci.sweeps", "[]")


@case
def zero_layers():
    c = base()
    ci(c)["size"]["n_layers"] = 0
    return Bad(c, "presets.ci.size.n_layers", "0")


@case
def hybrid_pattern_with_a_trailing_newline():
    c = base()
    ci(c)["size"]["hybrid_pattern"] = "MA\n"
    return Bad(c, "presets.ci.size.hybrid_pattern", repr("MA\n"))


@case
def headline_selector_of_an_unknown_axis():
    c = base()
    ci(c)["headline"] = [{"d_state": [4]}]
    return Bad(c, "presets.ci.headline[0]", "'d_state'")


# -- integers written as floats: refused, with the integer to write ----------------------


@case
def length_as_float():
    bad = with_sweep("seq_len", [32.0], "seq_len[0]")
    return Bad(bad.config, bad.key, "32.0 is not of type 'integer' (an integer is meant: write 32")


@case
def batch_as_float():
    return with_sweep("batch", [1.0], "batch[0]")


@case
def width_as_float():
    c = base()
    ci(c)["size"]["d_model"] = 32.0
    return Bad(c, "presets.ci.size.d_model", "32.0")


@case
def warmup_calls_as_float():
    return with_timing("warmup", warmup=1.0)


@case
def seed_as_float_on_the_command_line():
    return with_cli(
        "seed", "1e3", "1000.0 is not of type 'integer' (an integer is meant: write 1000"
    )


@case
def seed_with_a_fraction():
    return with_cli("seed", "1.5")


# -- numbers out of range ----------------------------------------------------------------


@case
def seed_past_32_bits():
    return with_cli("seed", str(2**32))


@case
def seed_negative():
    return Bad({**base(), "seed": -1}, "seed", "-1")


@case
def seed_unset():
    return with_cli("seed", "", "None")


@case
def time_not_a_number():
    return with_timing("min_time_s", min_time_s=math.nan)


@case
def time_infinite():
    return with_timing("max_time_s", max_time_s=math.inf)


@case
def mem_mb_below_what_python_needs():
    bad = with_preset("mem_mb", 100)
    return Bad(bad.config, bad.key, f"100 MB is below the {sbconfig.MIN_MEM_MB} MB")


@case
def address_space_below_what_python_needs():
    bad = with_preset("cpu_mem_limit_gb", 0.5)
    return Bad(bad.config, bad.key, f"0.5 GiB is below the {sbconfig.MIN_CPU_MEM_LIMIT_GB} GiB")


# -- bounds that cross keys --------------------------------------------------------------


@case
def fewer_max_samples_than_min():
    bad = with_timing("max_samples", max_samples=2)
    return Bad(bad.config, bad.key, "2 is less than min_samples=3")


@case
def max_time_below_min_time():
    bad = with_timing("max_time_s", min_time_s=3.0, max_time_s=2.0)
    return Bad(bad.config, bad.key, "2.0 is less than min_time_s=3.0")


@case
def timeout_below_min_time():
    bad = with_timing("timeout_s", min_time_s=1.0, timeout_s=0.5)
    return Bad(bad.config, bad.key, "0.5 is less than min_time_s=1.0")


@case
def paired_max_time_below_its_min_time():
    c = base()
    ci(c)["paired"]["timing"]["min_time_s"] = 1.5  # its max_time_s is 1.0
    return Bad(c, "presets.ci.paired.timing.max_time_s", "1.0 is less than min_time_s=1.5")


@case
def paired_sweep_with_attention():
    c = base()
    ci(c)["paired"]["sweeps"][0]["models"] = ["attention", "mamba2"]
    return Bad(c, "presets.ci.paired.sweeps[0].models", "attention is the other side")


@case
def paired_sweep_profiled():
    c = base()
    ci(c)["paired"]["sweeps"][0]["profile"] = True
    return Bad(c, "presets.ci.paired.sweeps[0].profile", "not profiled")


@case
def figure_of_a_backend_not_measured():
    c = base()
    c["figures"]["latency_scaling"] = {"phase": "prefill", "backends": ["fused"]}
    return Bad(c, "figures.latency_scaling.backends", "'fused'")


@case
def figure_of_a_model_not_measured():
    c = base()
    for s in ci(c)["sweeps"]:
        s["models"] = ["attention"]
    c["figures"]["latency_scaling"] = {"models": ["mamba"]}
    return Bad(c, "figures.latency_scaling.models", "'mamba' is not measured by preset 'ci'")


@case
def operator_figure_without_profiled_cells():
    c = base()
    for s in ci(c)["sweeps"]:
        s.pop("profile", None)
    return Bad(c, "figures.op_breakdown", "no cell with profile: true")


# -- run names: folders under results/, figures/, logs/ ----------------------------------


@case
def run_escaping_its_folder():
    return Bad({**base(), "run": "../escape"}, "run", "'../escape'")


@case
def run_with_a_slash():
    return with_cli("run", "a/b", "'a/b'")


@case
def run_with_a_trailing_newline():
    return Bad({**base(), "run": "ci\n"}, "run", repr("ci\n"))


@case
def run_name_too_long():
    return with_cli("run", "r" * 65, f"'{'r' * 65}' is too long")


@case
def run_named_precollected():
    return with_cli("run", "precollected", "'precollected' is reserved")


@case
def run_named_imported():
    return with_cli("run", "Imported", "'Imported' is reserved")


@case
def run_named_provenance():
    return with_cli("run", "provenance", "'provenance' is reserved")


@case
def preset_run_named_imported():
    return with_preset("run", "imported")


@case
def preset_named_precollected():
    c = base()
    c["presets"]["precollected"] = c["presets"].pop("ci")
    c["preset"] = "precollected"
    return Bad(c, "preset", "'precollected' is reserved")


# -- paths that hold nothing -------------------------------------------------------------


@case
def ssm_scope_clone_missing():
    return with_cli("import_ssm_scope", "/nonexistent/SSM-Scope", "'/nonexistent/SSM-Scope'")


@case
def ssm_scope_clone_a_file():
    readme = str(sbconfig.REPO / "README.md")  # a file, in the copy and here
    return with_cli("import_ssm_scope", readme, f"{readme!r} is not a folder")


@case
def ssm_scope_clone_empty():
    return Bad({**base(), "import_ssm_scope": ""}, "import_ssm_scope", "''")


@case
def precollected_dir_without_runs():
    return with_cli("precollected_dir", "results/none", "'results/none'", ("source=precollected",))


IDS = list(CASES)


def test_the_table_has_forty_distinct_cases():
    """Distinct: no two cases hand plan() the same config."""
    configs = {yaml.safe_dump(make().merged(), sort_keys=True) for make in CASES.values()}
    assert len(configs) == len(CASES) >= 40


def test_the_shipped_config_is_not_refused():
    """Without this, a table of refusals would pass against a plan() that refuses all."""
    assert sbconfig.plan(Bad(base(), "", "").merged(), cuda=False).run == "ci"


@pytest.mark.parametrize("name", IDS)
def test_plan_refuses_naming_the_key_and_the_value(name):
    bad = CASES[name]()
    with pytest.raises(sbconfig.ConfigError) as info:
        sbconfig.plan(bad.merged(), cuda=False)
    message = str(info.value)
    assert f"config key {bad.key}:" in message
    assert bad.value in message


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under ``root`` with its size and mtime, but Snakemake's own
    .snakemake/ and Python's __pycache__/."""
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if not {".snakemake", "__pycache__"} & set(p.relative_to(root).parts)
    }


@dataclass(frozen=True)
class Refusal:
    """What Snakemake did with a bad case, in a copy of the workflow of its own."""

    out: subprocess.CompletedProcess
    before: dict[str, tuple[int, int]]  # tree() before the run and after it
    after: dict[str, tuple[int, int]]
    workflow: Path


def refuse(name: str, root: Path) -> Refusal:
    """Run the workflow on case ``name``: its config as config/config.yaml, its entries
    after --config.  (No shipped runs in the copy: a smaller copy, and no case needs one.)"""
    bad = CASES[name]()
    wf = copy_workflow(root / name, precollected=False)
    (wf / "config" / "config.yaml").write_text(yaml.safe_dump(bad.config))
    before = tree(wf)
    args = ["--config", *bad.cli] if bad.cli else []
    out = snakemake(wf, *args, env={"SSMBENCH_DEVICE": "cpu"}, timeout=120)
    return Refusal(out, before, tree(wf), wf)


WORKFLOW_TEST = "test_the_workflow_refuses_before_any_job_and_writes_nothing"


@pytest.fixture(scope="module")
def refusals(request, tmp_path_factory) -> dict[str, Refusal]:
    """The selected cases through Snakemake, two at a time: most of a refusal's ~3 s is
    Snakemake starting up, and 40-odd of them in a row would take minutes."""
    names = [
        item.callspec.params["name"]
        for item in request.session.items
        if getattr(item, "originalname", None) == WORKFLOW_TEST
    ]
    root = tmp_path_factory.mktemp("bad-input")
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(names, pool.map(lambda name: refuse(name, root), names), strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("name", IDS)
def test_the_workflow_refuses_before_any_job_and_writes_nothing(refusals, name):
    bad, run = CASES[name](), refusals[name]
    assert run.out.returncode != 0
    assert "ssm-bench: " in run.out.stderr and f"config key {bad.key}:" in run.out.stderr
    assert bad.value in run.out.stderr
    assert run.after == run.before
    assert not (run.workflow / "figures").exists() and not (run.workflow / "logs").exists()
    assert list((run.workflow / "results").iterdir()) == []
