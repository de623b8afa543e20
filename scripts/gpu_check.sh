#!/usr/bin/env bash
# Run the benchmark on a rented GPU machine with no internet, within a time budget, and
# always bring its data home.
#
#   scripts/gpu_check.sh DEST [PRESET] [--budget-s N] [--reserve-s R] [--lock-clocks]
#                        [--tests EXPR]
#
# PRESET defaults to h200 (`lease` is sized for one command of about ten minutes).
# 1. Installs what the machine lacks (snakemake, papermill, mamba_ssm, fla, ...) from the
#    wheels in .whl/ (made by `make wheels` on a machine with internet), offline, so that
#    the machine's own torch, triton, numpy and pandas stay the ones used.
# 2. Prints the plan: jobs and estimated seconds (python -m ssmbench plan).
# 3. Runs the workflow on PRESET, headline cells first (Snakemake priorities), one GPU
#    job at a time.  With --budget-s N the whole script keeps to N seconds: at N - R
#    (R = --reserve-s, default 90) the run is stopped, as on SIGTERM; a failed job does
#    not stop the others.
# 4. A run that did not finish is finished from what it left (snakemake --config
#    partial=<why it stopped>: records whose provenance vouches for them; cells never reached are
#    not_run with reason budget): tables, verdict, then the figures there is time for.
# 5. Packs everything into DEST as at most 8 flat files of at most 16 MiB (ssmbench.pack:
#    ssmbench-<run>.tar.gz, traces-<run>.tar.gz, cells.csv, summary.txt, targets.txt,
#    gpu_check.log, manifest.txt) and prints the summary table last.
# --tests EXPR runs `pytest -k EXPR` first (e.g. gpu: the checks only a GPU can make, about
# 90 s on an H200), at most a third of the budget, its output in DEST/pytest.txt.
# --lock-clocks locks the GPU's clocks for the run and restores them at the end (only
# where the machine's owner allows it); every record says whether they were locked.
# On a CPU-only machine it runs the same way (PRESET=ci rehearses it there).
set -uo pipefail

usage="usage: scripts/gpu_check.sh DEST [PRESET] [--budget-s N] [--reserve-s R] [--lock-clocks] [--tests EXPR]"
DEST="" PRESET="" BUDGET_S="" RESERVE_S=90 LOCK_CLOCKS=0 TESTS=""
while [ $# -gt 0 ]; do
    case "$1" in
        --budget-s) BUDGET_S=${2:?$usage}; shift 2 ;;
        --reserve-s) RESERVE_S=${2:?$usage}; shift 2 ;;
        --lock-clocks) LOCK_CLOCKS=1; shift ;;
        --tests) TESTS=${2:?$usage}; shift 2 ;;
        -h|--help) echo "$usage"; exit 0 ;;
        -*) echo "error: unknown option $1; $usage" >&2; exit 2 ;;
        *) if [ -z "$DEST" ]; then DEST=$1; elif [ -z "$PRESET" ]; then PRESET=$1;
           else echo "error: unexpected argument $1; $usage" >&2; exit 2; fi; shift ;;
    esac
done
[ -n "$DEST" ] || { echo "error: DEST is missing; $usage" >&2; exit 2; }
PRESET=${PRESET:-h200}
for n in ${BUDGET_S:+"$BUDGET_S"} "$RESERVE_S"; do
    [[ "$n" =~ ^[0-9]+$ ]] || { echo "error: --budget-s and --reserve-s take whole seconds, got $n" >&2; exit 2; }
done
if [ -n "$BUDGET_S" ] && [ "$BUDGET_S" -le "$RESERVE_S" ]; then
    echo "error: --budget-s $BUDGET_S leaves nothing after --reserve-s $RESERVE_S" >&2; exit 2
fi
START=$(date +%s)
RUN=${RUN:-$PRESET}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)
LOG="$DEST/gpu_check.log"
: > "$LOG"
exec > >(tee -a "$LOG") 2>&1  # everything below is also in DEST/gpu_check.log
TEE_PID=$!

STOPPED=""      # why the run was stopped early: budget, sigterm
SNAKE_PID=""
elapsed() { echo $(( $(date +%s) - START )); }
# Snakemake runs in a process group of its own (setsid), so that stopping it stops every
# job it started; without setsid, Snakemake alone is signalled and stops its jobs itself.
GROUP=""
command -v setsid >/dev/null && GROUP="-"
stop_run() {    # stop scheduling: Snakemake and every job it started
    [ -n "$SNAKE_PID" ] && kill -0 "$SNAKE_PID" 2>/dev/null || return 0
    kill -TERM -- "$GROUP$SNAKE_PID" 2>/dev/null
    for _ in $(seq 20); do kill -0 "$SNAKE_PID" 2>/dev/null || return 0; sleep 1; done
    kill -KILL -- "$GROUP$SNAKE_PID" 2>/dev/null
}
on_signal() { STOPPED=${STOPPED:-sigterm}; echo "== $1 after $(elapsed) s: stopping the run"; stop_run; }
trap 'on_signal SIGTERM' TERM
trap 'on_signal SIGINT' INT

# Runs "$@" as its own process group, stopped at the deadline (epoch seconds, or empty).
run_until() {
    local deadline=$1; shift
    if [ -n "$GROUP" ]; then setsid "$@" & else "$@" & fi
    SNAKE_PID=$!
    while kill -0 "$SNAKE_PID" 2>/dev/null; do
        if [ -n "$deadline" ] && [ "$(date +%s)" -ge "$deadline" ]; then
            STOPPED=${STOPPED:-budget}
            echo "== budget: stopping the run after $(elapsed) s"
            stop_run
            break
        fi
        sleep 1
    done
    wait "$SNAKE_PID" 2>/dev/null
    local status=$?
    SNAKE_PID=""
    return $status
}

echo "== ssm-bench gpu_check: preset=$PRESET run=$RUN dest=$DEST budget=${BUDGET_S:-none} s"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "no nvidia-smi: CPU run"

# 1. the environment: the system's packages, plus the wheels for what is missing
# ---- step 1, install (scripts/offline_install.sh: --target and PYTHONPATH, no venv) ----
PY=${PYTHON:-python3}  # the machine's python (PYTHON= overrides)
NEEDED=(snakemake papermill pandera jsonschema matplotlib pyarrow ipykernel yaml)
missing=()
for module in "${NEEDED[@]}"; do
    "$PY" -c "import $module" 2>/dev/null || missing+=("$module")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "== missing ${missing[*]}: installing from .whl/ (offline)"
    # the machine's torch, triton and numpy stay visible: PYTHONPATH adds, a venv would hide
    env_line=$(PYTHON="$PY" scripts/offline_install.sh "${SSMBENCH_SITE:-/tmp/ssmbench-site}" .whl)
    eval "$env_line"  # export PYTHONPATH and PATH, for $PY and every job it starts
    for module in "${missing[@]}"; do
        "$PY" -c "import $module" || { echo "error: $module still missing after the install" >&2; exit 2; }
    done
fi
# ---- end of step 1 ----
"$PY" - <<'PYEOF'
import importlib, sys
print("== python", sys.version.split()[0])
for name in ("torch", "triton", "numpy", "pandas", "snakemake", "papermill", "fla", "flash_attn"):
    try:
        module = importlib.import_module(name)
        print(f"   {name:36s} {getattr(module, '__version__', 'ok')}")
    except Exception as e:  # a missing fused package is data: its cells say unavailable
        print(f"   {name:36s} not importable: {type(e).__name__}: {str(e)[:80]}")
sys.path.insert(0, "src")
import torch
from ssmbench.models.kernels import unavailable_reason
from ssmbench.registry import FAMILIES, PHASES
device = "cuda" if torch.cuda.is_available() else "cpu"
for family in FAMILIES:
    reasons = {phase: unavailable_reason(family, device, phase=phase) for phase in PHASES}
    if len(set(reasons.values())) == 1:
        print(f"   fused {family:30s} {reasons['prefill'] or 'available'}")
    else:
        for phase, reason in reasons.items():
            print(f"   fused {family + ' ' + phase:30s} {reason or 'available'}")
PYEOF

# 2. the plan, by arithmetic (ssmbench.budget)
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's package
"$PY" -m ssmbench plan --preset "$PRESET" --run "$RUN" \
    || { echo "error: preset $PRESET cannot be planned" >&2; exit 2; }

if [ -n "$TESTS" ]; then  # the tests first: a failure there is data, not a stop
    limit=300
    [ -n "$BUDGET_S" ] && limit=$(( BUDGET_S / 3 ))
    echo "== pytest -k '$TESTS' (at most $limit s)"
    timeout "$limit" "$PY" -m pytest -q -p no:cacheprovider -k "$TESTS" > "$DEST/pytest.txt" 2>&1
    echo "== pytest exit status $? after $(elapsed) s: $(tail -n 1 "$DEST/pytest.txt")"
fi

if [ "$LOCK_CLOCKS" = 1 ]; then
    if "$PY" -m ssmbench clocks lock; then
        export SSMBENCH_CLOCKS_LOCKED=1
        trap '"$PY" -m ssmbench clocks restore' EXIT
    else
        echo "== clocks not locked: the run measures them as they are"
    fi
fi

# 3. the run, under the budget; a failed job must not lose what the others measured
DEADLINE=""
[ -n "$BUDGET_S" ] && DEADLINE=$(( START + BUDGET_S - RESERVE_S ))
CONFIG=(preset="$PRESET" run="$RUN")
status=0
run_until "$DEADLINE" "$PY" -m snakemake --cores all --keep-going --config "${CONFIG[@]}" || status=$?
echo "== run ended after $(elapsed) s: snakemake exit status $status${STOPPED:+, stopped: $STOPPED}"

# 4. a run that did not finish: tables and figures from what it left, nothing measured
if [ "$status" -ne 0 ] || [ -n "$STOPPED" ]; then
    "$PY" -m snakemake --cores 1 --unlock --config "${CONFIG[@]}" >/dev/null 2>&1
    FINISH_BY=""
    [ -n "$BUDGET_S" ] && FINISH_BY=$(( START + BUDGET_S - 20 ))  # 20 s left to pack
    echo "== finishing from the records that exist (partial=${STOPPED:-failure})"
    run_until "$FINISH_BY" "$PY" -m snakemake --cores all --keep-going --rerun-triggers mtime \
        --allowed-rules aggregate verdict figure_table figure all \
        --config "${CONFIG[@]}" partial="${STOPPED:-failure}" || echo "== finishing ended with status $?"
fi

# 5. what goes home
"$PY" scripts/summary.py "$RUN" "$PRESET" > "$DEST/summary.txt" 2>&1
"$PY" scripts/check_targets.py "$RUN" > "$DEST/targets.txt" 2>&1
[ -f "results/$RUN/tables/cells.csv" ] && cp "results/$RUN/tables/cells.csv" "$DEST/cells.csv"
echo "== packing into $DEST after $(elapsed) s"
"$PY" -m ssmbench pack "$DEST" --run "$RUN" \
    --extra "$LOG" "$DEST/summary.txt" "$DEST/targets.txt" "$DEST/cells.csv" "$DEST/pytest.txt"
cat "$DEST/targets.txt"
echo "== snakemake exit status $status${STOPPED:+ (stopped: $STOPPED)}; $(elapsed) s; outputs in $DEST"
cat "$DEST/summary.txt"
exec >&- 2>&-
wait "$TEE_PID" 2>/dev/null  # the log is complete before the script returns
[ -n "$STOPPED" ] && exit 0  # stopped on purpose: what it measured is in DEST
exit $status
