#!/usr/bin/env bash
# Install the wheels of WHEEL_DIR (made by `make wheels` where there is internet) into
# TARGET_DIR, offline, and print the one line that lets the python see them:
#
#   env_line=$(scripts/offline_install.sh TARGET_DIR [WHEEL_DIR])   # WHEEL_DIR: .whl
#   eval "$env_line"    # export PYTHONPATH=TARGET_DIR${PYTHONPATH:+:...} PATH=TARGET_DIR/bin:$PATH
#
# Take the line into a variable first, as above: `eval "$(...)"` would hide a failure.
# stdout is that line only; progress and errors go to stderr.  The python is $PYTHON, else
# python3: the one that will import the packages (pip runs under it).
#
# Why --target and PYTHONPATH, not a virtual environment: on the GPU machine python3 is
# itself a venv's interpreter (torch, triton, numpy are in that venv), and a venv made from
# it with --system-site-packages sees the base interpreter's packages, not that venv's, so
# torch vanishes.  PYTHONPATH puts TARGET_DIR before the python's own site-packages, which
# stay visible.  Every wheel goes in with --no-deps and no index: `make wheels` resolved the
# closure for CPython 3.12 and checked it (src/ssmbench/offline.py), and pip could not
# resolve mamba_ssm offline anyway (it declares tilelang, quack-kernels, ...; its Triton
# kernels need only torch, triton and einops), so it goes in on its own line.  Wheels of
# torch, triton or numpy are never installed: the machine's builds stay.
#
# A second run with the same wheels and python installs nothing: TARGET_DIR/.offline-install
# holds the sha256 of the python and the wheel list.  Exit 2: no wheels in WHEEL_DIR, no such
# python, or TARGET_DIR is a non-empty folder that this script did not make.
set -euo pipefail

usage="usage: scripts/offline_install.sh TARGET_DIR [WHEEL_DIR]"
TARGET=${1:?$usage}
WHEELS=${2:-.whl}
PY=${PYTHON:-python3}
STAMP=.offline-install
NEVER=" torch triton numpy "

shopt -s nullglob
all=("$WHEELS"/*.whl)
if [ ${#all[@]} -eq 0 ]; then
    echo "error: no wheels in $WHEELS/: run 'make wheels' where there is internet and copy" \
        "the folder beside this checkout" >&2
    exit 2
fi
if ! pyid=$("$PY" -c 'import sys; print(sys.executable, sys.version)' 2>/dev/null); then
    echo "error: no python at '$PY' (set PYTHON=)" >&2
    exit 2
fi
mkdir -p "$(dirname "$TARGET")"
TARGET=$(cd "$(dirname "$TARGET")" && pwd)/$(basename "$TARGET")
digest=$({ echo "$pyid"; for w in "${all[@]}"; do basename "$w"; done | LC_ALL=C sort; } |
    sha256sum | cut -d' ' -f1)

if [ -f "$TARGET/$STAMP" ] && [ "$(cat "$TARGET/$STAMP")" = "$digest" ]; then
    echo "== $TARGET is up to date with $WHEELS/ (${#all[@]} wheels): nothing to install" >&2
else
    if [ -d "$TARGET" ] && [ ! -f "$TARGET/$STAMP" ] && [ -n "$(ls -A "$TARGET")" ]; then
        echo "error: $TARGET is not empty and was not made by this script: name a new folder" >&2
        exit 2
    fi
    partial="$TARGET.partial.$$"
    rm -rf "$partial"
    trap 'rm -rf "$partial"' EXIT
    rest=()
    mamba=()
    for wheel in "${all[@]}"; do
        name=$(basename "$wheel")
        name=$(echo "${name%%-*}" | tr 'A-Z' 'a-z' | tr '_.' '--')  # canonical distribution
        if [[ $NEVER == *" $name "* ]]; then
            echo "== skipping $wheel: the machine's own $name stays" >&2
        elif [ "$name" = mamba-ssm ]; then
            mamba+=("$wheel")
        else
            rest+=("$wheel")
        fi
    done
    pip=(env PIP_ROOT_USER_ACTION=ignore "$PY" -m pip install -q --disable-pip-version-check
        --no-index --no-deps --no-cache-dir --target "$partial")
    echo "== installing $((${#rest[@]} + ${#mamba[@]})) wheel(s) from $WHEELS/ into $TARGET" \
        "(offline, --no-deps) for $PY" >&2
    if [ ${#rest[@]} -gt 0 ]; then "${pip[@]}" "${rest[@]}" >&2; fi
    if [ ${#mamba[@]} -gt 0 ]; then "${pip[@]}" "${mamba[@]}" >&2; fi
    mkdir -p "$partial"
    echo "$digest" >"$partial/$STAMP"
    rm -rf "$TARGET"
    mv "$partial" "$TARGET"
    trap - EXIT
fi

q=$(printf '%q' "$TARGET")
echo "export PYTHONPATH=$q\${PYTHONPATH:+:\$PYTHONPATH} PATH=$q/bin:\$PATH"
