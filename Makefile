# Two commands on a fresh machine:  `make reproduce`  and  `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
CORES  ?= all
SNAKEMAKE := $(BIN)/snakemake --cores $(CORES)

.PHONY: venv fused slurm cluster reproduce test test-fast lint report figures-precollected artifact lock clean wheels

# torch goes first and alone, so no later requirement can pull a CUDA build of it.
$(VENV)/.installed: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -c requirements.lock -e '.[bench,dev]'
	touch $@

venv: $(VENV)/.installed

# The `fused` backend: triton, einops and flash-linear-attention from the extra, then
# mamba_ssm without build isolation (its setup.py imports the installed torch) and without
# its dependencies (they would pull transformers, tilelang and a CUDA torch; its Triton
# kernels need only triton and einops).  Its CUDA extension (selective_scan_cuda, Mamba-1's
# prefill kernel) is built, which takes long, only where nvcc is found and torch is a CUDA
# build; elsewhere, or with `make fused MAMBA_SKIP_CUDA_BUILD=TRUE`, only the Triton kernels.
MAMBA_SKIP_CUDA_BUILD ?= $(shell command -v nvcc >/dev/null 2>&1 \
	&& $(BIN)/python -c 'import sys, torch; sys.exit(torch.version.cuda is None)' 2>/dev/null \
	&& echo FALSE || echo TRUE)

$(VENV)/.fused: $(VENV)/.installed
	$(BIN)/pip install --quiet -c requirements.lock -e '.[fused]'
	MAMBA_SKIP_CUDA_BUILD=$(MAMBA_SKIP_CUDA_BUILD) MAMBA_FORCE_BUILD=TRUE \
	  $(BIN)/pip install --quiet --no-build-isolation --no-deps -c requirements.lock mamba-ssm
	touch $@

fused: $(VENV)/.fused  ## install the fused backend's kernels (mamba_ssm, fla, triton)

# profiles/slurm's executor plugin and its job step, at requirements.lock's versions,
# without their dependencies (pyproject.toml says why), into a folder of their own that
# only a SLURM run puts on PYTHONPATH: Snakemake imports every installed executor plugin
# at start, in every job's process too, and this one imports pandas (0.2-0.5 s each here).
SLURM_PLUGINS := $(abspath $(VENV))/slurm-plugins
$(SLURM_PLUGINS)/.installed: $(VENV)/.installed
	$(BIN)/pip install --quiet --no-deps -c requirements.lock --target $(SLURM_PLUGINS) \
	  snakemake-executor-plugin-slurm snakemake-executor-plugin-slurm-jobstep
	touch $@

slurm: $(SLURM_PLUGINS)/.installed  ## install the SLURM executor plugin (profiles/slurm) into .venv/slurm-plugins

# Every job as a SLURM job (profiles/slurm; README, "On a SLURM cluster").  The partition
# is required; CONFIG as for `make report`.
cluster: $(SLURM_PLUGINS)/.installed  ## run the main job on a SLURM cluster: make cluster SSMBENCH_SLURM_PARTITION=<p>
	@test -n "$(SSMBENCH_SLURM_PARTITION)" \
	  || { echo "make cluster: set SSMBENCH_SLURM_PARTITION=<partition>" >&2; exit 2; }
	SSMBENCH_SLURM_PARTITION=$(SSMBENCH_SLURM_PARTITION) PYTHONPATH=$(SLURM_PLUGINS) $(BIN)/snakemake \
	  --workflow-profile profiles/slurm $(SLURM_ARGS) $(if $(CONFIG),--config $(CONFIG))

reproduce: venv  ## set up, then run the main job (the `cpu` preset here, `gpu` on a GPU box)
	$(SNAKEMAKE)

# Tests run on one pytest-xdist worker per core (tests/conftest.py keeps a module's tests,
# and the modules that read one finished run, on one worker); PYTEST_WORKERS=0 runs them
# in this process, one after another.
PYTEST_WORKERS ?= auto
PYTEST := $(BIN)/pytest -n $(PYTEST_WORKERS)

test: $(VENV)/.fused $(SLURM_PLUGINS)/.installed  ## set up (with the fused kernels, checked under Triton's interpreter, and the SLURM plugin), then the tests
	$(PYTEST)

# The loop to run while editing: every test that starts no Snakemake process and trains or
# times nothing long (tests/conftest.py marks the others `slow`), in a few minutes.
test-fast: $(VENV)/.fused  ## the fast tests only (no Snakemake runs, nothing long): pytest -m "not slow"
	$(PYTEST) -m "not slow"

lint: venv
	$(BIN)/ruff check .
	$(BIN)/snakefmt --check Snakefile workflow/rules
	$(BIN)/snakemake --lint

# One self-contained HTML page (figures, claims table, verdict) of a finished run; pass the
# run's config as for the run itself, e.g. `make report CONFIG="preset=ci"`.
REPORT ?= report.html
report: venv  ## the run's figures, claims and verdict as one HTML page (after the run)
	$(BIN)/snakemake --report $(REPORT) $(if $(CONFIG),--config $(CONFIG))

# Both check the shipped runs first, every file against its sidecar and its run's
# MANIFEST.sha256, and stop on a mismatch naming the file (the workflow checks them again
# before each run's figures: rule verify_provenance).
figures-precollected: venv  ## every figure from results/precollected/, nothing measured
	$(BIN)/python -m ssmbench verify-provenance results/precollected
	$(SNAKEMAKE) --config source=precollected

# Artifact evaluation in an environment without torch: only the analysis dependencies.
# SSM_SCOPE=<clone of sapmitra/SSM-Scope>: its runs too, and the cross-device figures
# (figures/compare/devices/) of the shipped block runs beside them
artifact:
	$(PYTHON) -m venv .venv-artifact
	.venv-artifact/bin/pip install --quiet -c requirements.lock -e .
	.venv-artifact/bin/python -m ssmbench verify-provenance results/precollected
	.venv-artifact/bin/snakemake --cores $(CORES) --config source=precollected $(if $(SSM_SCOPE),import_ssm_scope=$(SSM_SCOPE))

# Wheels for scripts/offline_install.sh on a GPU machine without internet (CPython 3.12,
# x86-64, with the packages of config/device-packages.txt, torch among them): the closure
# of the workflow's needs at requirements.lock's versions, less what that machine has, and
# mamba_ssm built without its CUDA extension (its Triton kernels need none).  It ends by
# resolving the offline install for 3.12 from them (src/ssmbench/offline.py); about 43 MB,
# small enough to carry beside the checkout (./.whl is git-ignored).
WHEELS ?= .whl
wheels: venv  ## wheels for scripts/gpu_check.sh, into ./.whl (needs internet)
	PYTHONPATH=src $(BIN)/python -m ssmbench.offline build $(WHEELS)

lock: venv  ## rewrite requirements.lock from the current environment
	( echo "# Exact versions of the workflow environment (pip constraints), tested on CPython 3.11."; \
	  echo "# Regenerate with 'make lock' after changing pyproject.toml; envs/*.yaml carry the same pins."; \
	  $(BIN)/pip freeze --exclude-editable | sed 's/^torch==\([0-9.]*\)+.*/torch==\1/' ) > requirements.lock

clean:
	rm -rf results/ci results/cpu figures logs .snakemake
