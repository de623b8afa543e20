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
from snakemake.utils import update_config

from ssmbench import config as sbconfig
from ssmbench.paths import REPO
from tests.conftest import clone, snakemake

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
        """The config the Snakefile hands plan(): the file's with ``--config``'s entries
        merged in (as Snakemake merges them), their nested values typed as the workflow
        types them (``ssmbench.config.from_command_line``)."""
        entries = parse_config(list(self.cli))
        merged = copy.deepcopy(self.config)
        update_config(merged, entries)
        return sbconfig.from_command_line(merged, entries)


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
def run_named_compare():  # results/compare/ and figures/compare/ hold runs side by side
    return with_cli("run", "compare", "'compare' is reserved")


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
    readme = str(REPO / "README.md")  # a file, in the copy and here
    return with_cli("import_ssm_scope", readme, f"{readme!r} is not a folder")


@case
def ssm_scope_clone_empty():
    return Bad({**base(), "import_ssm_scope": ""}, "import_ssm_scope", "''")


@case
def precollected_dir_without_runs():
    return with_cli("precollected_dir", "results/none", "'results/none'", ("source=precollected",))


@case
def ssm_scope_clone_that_is_not_one():
    bad = with_cli("import_ssm_scope", "docs")  # a folder, in the copy and here
    return Bad(bad.config, bad.key, "'docs' is not a clone of sapmitra/SSM-Scope", bad.cli)


# -- keys that select nothing, names typed as numbers -------------------------------------


@case
def headline_selector_that_selects_nothing():
    c = base()
    ci(c)["headline"] = [{"models": ["mamba2"], "seq_len": [4096]}]
    return Bad(c, "presets.ci.headline[0]", "selects no cell")


@case
def run_as_a_float_on_the_command_line():
    return with_cli("run", "1.5", "1.5 is a number, and a run name is text")


@case
def nested_command_line_number_out_of_range():
    """A number nested in --config keeps its type (so its range is what is judged)."""
    return Bad(
        base(),
        "presets.ci.timing.max_time_s",
        "-3.0 is less than or equal to the minimum of 0",
        ("presets={ci: {timing: {max_time_s: -3.0}}}",),
    )


# -- the task budgets: checked before any job, not inside one ------------------------------


def with_task_budget(task: str, where: str, value) -> Bad:
    """tasks-ci's budget for ``task`` with ``where`` (dotted, under the task) set to
    ``value``."""
    c = base()
    c["preset"] = "tasks-ci"
    node = c["presets"]["tasks-ci"]["tasks"]["budget"][task]
    *parents, leaf = where.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return Bad(c, f"presets.tasks-ci.tasks.budget.{task}.{where}", repr(value))


@case
def task_epochs_negative():
    return with_task_budget("parity", "train.epochs", -1)


@case
def task_epochs_fractional():
    return with_task_budget("parity", "train.epochs", 1.5)


@case
def task_epochs_as_text():
    return with_task_budget("parity", "train.epochs", "3")


@case
def task_learning_rate_zero():
    return with_task_budget("parity", "train.lr", 0)


@case
def task_scheduler_unknown():
    return with_task_budget("parity", "train.scheduler", "step")


@case
def task_warmup_over_the_whole_run():
    return with_task_budget("parity", "train.warmup_frac", 2)


@case
def task_batch_size_zero():
    return with_task_budget("parity", "train.batch_size", 0)


@case
def task_no_training_sequences():
    return with_task_budget("parity", "data.train.n", 0)


@case
def task_pairs_that_do_not_fit_the_sequence():
    bad = with_task_budget("selective_copy", "data.train.max_pairs", 9)
    return Bad(bad.config, "presets.tasks-ci.tasks.budget.selective_copy.data.train", "max_pairs=9")


@case
def task_model_whose_heads_do_not_divide():
    bad = with_task_budget("parity", "models.mamba2.headdim", 12)
    return Bad(bad.config, "presets.tasks-ci.tasks.budget.parity.models.mamba2", "headdim 12")


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


def refuse(name: str, root: Path, pristine: Path) -> Refusal:
    """Run the workflow on case ``name``: its config as config/config.yaml, its entries
    after --config.  (No shipped runs in the copy: a smaller copy, and no case needs one.)"""
    bad = CASES[name]()
    wf = clone(pristine, root / name)
    (wf / "config" / "config.yaml").write_text(yaml.safe_dump(bad.config))
    before = tree(wf)
    args = ["--config", *bad.cli] if bad.cli else []
    out = snakemake(wf, *args, env={"SSMBENCH_DEVICE": "cpu"}, timeout=120)
    return Refusal(out, before, tree(wf), wf)


WORKFLOW_TEST = "test_the_workflow_refuses_before_any_job_and_writes_nothing"


@pytest.fixture(scope="module")
def refusals(request, pristine_workflow, tmp_path_factory) -> dict[str, Refusal]:
    """The selected cases through Snakemake, two at a time: most of a refusal's ~3 s is
    Snakemake starting up, and 40-odd of them in a row would take minutes."""
    names = [
        item.callspec.params["name"]
        for item in request.session.items
        if getattr(item, "originalname", None) == WORKFLOW_TEST
    ]
    root = tmp_path_factory.mktemp("bad-input")
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(
            zip(
                names,
                pool.map(lambda name: refuse(name, root, pristine_workflow), names),
                strict=True,
            )
        )


@pytest.mark.parametrize("name", IDS)
def test_the_workflow_refuses_before_any_job_and_writes_nothing(refusals, name):
    bad, run = CASES[name](), refusals[name]
    assert run.out.returncode != 0
    assert "ssm-bench: " in run.out.stderr and f"config key {bad.key}:" in run.out.stderr
    assert bad.value in run.out.stderr
    assert run.after == run.before
    assert not (run.workflow / "figures").exists() and not (run.workflow / "logs").exists()
    assert list((run.workflow / "results").iterdir()) == []


# -- values that mean what they say: accepted, with their type ----------------------------


def test_a_number_nested_in_the_command_line_keeps_its_type(tmp_path):
    bad = Bad(base(), "", "", ("presets={ci: {timing: {max_time_s: 3.0, warmup: 2}}}",))
    p = sbconfig.plan(bad.merged(), cuda=False)
    assert p.timing.max_time_s == 3.0 and p.timing.warmup == 2
    assert p.timing.min_samples == 3  # the rest of the preset is the file's


def test_a_run_named_by_digits_is_that_name():
    assert sbconfig.plan(with_cli("run", "123").merged(), cuda=False).run == "123"
    assert sbconfig.plan({**base(), "run": "1.5"}, cuda=False).run == "1.5"  # a file's text


def test_the_workflow_takes_typed_command_line_values(workflow_copy):
    wf = workflow_copy
    nested = "presets={ci: {timing: {max_time_s: 3.0}}}"
    out = snakemake(wf, "-n", "--config", "preset=ci", "run=123", nested, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "results/123/tables/cells.csv" in out.stdout


# -- config files: a key twice, a file that is no mapping ---------------------------------


def test_a_config_file_with_a_key_twice_is_refused_naming_the_key_and_its_lines(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("preset: ci\nseed: 1\npresets: {}\nseed: 2\n")
    with pytest.raises(sbconfig.ConfigError) as info:
        sbconfig.read_config_file(path)
    assert str(info.value) == (
        f"config file {path}, line 4: key 'seed' appears twice in one mapping (first at line "
        "2); the second would silently win"
    )


@pytest.mark.parametrize(
    ("text", "what"), [("- ci\n- cpu\n", "a list"), ("", "empty"), ("ci\n", "a str")]
)
def test_a_config_file_that_is_not_a_mapping_is_refused_naming_the_file(tmp_path, text, what):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(sbconfig.ConfigError, match=rf"^config file {path}: is {what}, not a"):
        sbconfig.read_config_file(path)


@pytest.mark.parametrize("where", ["config/config.yaml", "--configfile"])
def test_the_workflow_refuses_a_config_file_with_a_key_twice(workflow_copy, tmp_path, where):
    wf = workflow_copy
    extra = tmp_path / "extra.yaml"
    if where == "--configfile":
        extra.write_text("seed: 1\nseed: 2\n")
        args = ("--configfile", str(extra))
    else:
        config = wf / "config" / "config.yaml"
        config.write_text(config.read_text() + "seed: 7\n")
        args = ()
    before = tree(wf)
    out = snakemake(wf, *args, "--config", "preset=ci", timeout=120)
    assert out.returncode != 0
    shown = where if where != "--configfile" else str(extra)
    assert f"ssm-bench: config file {shown}, line " in out.stderr
    assert "key 'seed' appears twice" in out.stderr and "Traceback" not in out.stderr
    assert tree(wf) == before


def test_the_workflow_refuses_a_config_file_that_is_a_list(workflow_copy):
    wf = workflow_copy
    (wf / "config" / "config.yaml").write_text("- preset\n- ci\n")
    out = snakemake(wf, timeout=120)
    assert out.returncode != 0
    assert "ssm-bench: config file config/config.yaml: is a list, not a mapping" in out.stderr


# -- folders the run cannot write ----------------------------------------------------------


def read_only_mount(folder: Path):
    """Mount an empty read-only tmpfs on ``folder`` (root only); the unmount to call."""
    import os

    if os.geteuid() != 0:
        pytest.skip("mounting a read-only file system needs root (CI runs as root)")
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro", "tmpfs", str(folder)])
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs on {folder} here")
    return lambda: subprocess.run(["umount", str(folder)], check=True)


def test_an_unwritable_results_folder_is_refused_in_a_sentence(tmp_path, monkeypatch):
    from ssmbench import outcome

    monkeypatch.chdir(tmp_path)
    unmount = read_only_mount(tmp_path / "results")
    try:
        with pytest.raises(outcome.RunStopped) as info:
            outcome.check_writable(["results", "logs"])
    finally:
        unmount()
    assert str(info.value).startswith("results/ cannot be written: a read-only file system.")
    (tmp_path / "results").rmdir()
    (tmp_path / "results").write_text("a file")
    with pytest.raises(outcome.RunStopped, match="^results: is a file, where the run keeps"):
        outcome.check_writable(["results"])
    outcome.check_writable(["logs"])  # missing, in a folder that can be written: fine


def test_the_workflow_refuses_a_read_only_results_folder_before_any_job(workflow_copy):
    wf = workflow_copy
    unmount = read_only_mount(wf / "results")
    try:
        out = snakemake(wf, "--config", "preset=ci", timeout=120)
    finally:
        unmount()
    assert out.returncode != 0
    assert "ssm-bench: results/ cannot be written: a read-only file system." in out.stderr
    assert "Traceback" not in out.stderr and not (wf / "logs").exists()
