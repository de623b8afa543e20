#!/usr/bin/env bash
# Run the benchmark on a rented GPU machine with no internet, and collect what it made.
#
#   scripts/gpu_check.sh DEST [PRESET]        (PRESET defaults to h200)
#
# 1. Installs what the machine lacks (snakemake, papermill, mamba_ssm, fla, ...) from the
#    wheels in .whl/ (made by `make wheels` on a machine with internet), offline, into a
#    virtual environment that sees the system's torch, triton, numpy and pandas.
# 2. Runs the workflow on PRESET (calibration, verification, every cell, figures).
# 3. Writes to DEST: ssmbench-<run>.tar.gz (tables, records, verify records, device.json,
#    operator profiles, figures and every provenance sidecar), traces-<run>.tar.gz (the
#    Chrome traces), cells.csv, targets.txt (scripts/check_targets.py) and summary.txt,
#    the table this script prints last.
# On a CPU-only machine it runs the same way (PRESET=ci tests it there).
set -euo pipefail

DEST=${1:?usage: scripts/gpu_check.sh DEST [PRESET]}
PRESET=${2:-h200}
RUN=${RUN:-$PRESET}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)

echo "== ssm-bench gpu_check: preset=$PRESET run=$RUN dest=$DEST"
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
from ssmbench.models.fused import FUSED_AVAILABILITY
device = "cuda" if torch.cuda.is_available() else "cpu"
for family, reason in FUSED_AVAILABILITY.items():
    print(f"   fused {family:30s} {reason(device) or 'available'}")
PYEOF

# 2. the run; a failed job must not lose what the others measured
status=0
"$PY" -m snakemake --cores all --keep-going --config preset="$PRESET" run="$RUN" || status=$?

# 3. what goes home
tar czf "$DEST/ssmbench-$RUN.tar.gz" --exclude='*.trace.json.gz' \
    "results/$RUN" $( [ -d "figures/$RUN" ] && echo "figures/$RUN" ) $( [ -d "logs/$RUN" ] && echo "logs/$RUN" )
if compgen -G "results/$RUN/profile/*" >/dev/null; then
    find "results/$RUN/profile" -name '*.trace.json.gz' -print0 | tar czf "$DEST/traces-$RUN.tar.gz" --null -T -
fi
[ -f "results/$RUN/tables/cells.csv" ] && cp "results/$RUN/tables/cells.csv" "$DEST/cells.csv"
"$PY" scripts/check_targets.py "$RUN" | tee "$DEST/targets.txt" || true
"$PY" scripts/summary.py "$RUN" | tee "$DEST/summary.txt"
echo "== snakemake exit status $status; outputs in $DEST"
exit $status
