# Two commands on a fresh machine:  `make reproduce`  and  `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
CORES  ?= all
SNAKEMAKE := $(BIN)/snakemake --cores $(CORES)

.PHONY: venv reproduce test lint figures-precollected artifact lock clean

# torch goes first and alone, so no later requirement can pull a CUDA build of it.
$(VENV)/.installed: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -c requirements.lock -e '.[bench,dev]'
	touch $@

venv: $(VENV)/.installed

reproduce: venv  ## set up, then run the main job (the `cpu` preset here, `gpu` on a GPU box)
	$(SNAKEMAKE)

test: venv  ## set up, then run the test suite
	$(BIN)/pytest

lint: venv
	$(BIN)/ruff check .
	$(BIN)/snakefmt --check Snakefile workflow/rules
	$(BIN)/snakemake --lint

figures-precollected: venv  ## every figure from results/precollected/, nothing measured
	$(SNAKEMAKE) --config source=precollected

# Artifact evaluation in an environment without torch: only the analysis dependencies.
artifact:
	$(PYTHON) -m venv .venv-artifact
	.venv-artifact/bin/pip install --quiet -c requirements.lock -e .
	.venv-artifact/bin/snakemake --cores $(CORES) --config source=precollected

lock: venv  ## rewrite requirements.lock from the current environment
	( echo "# Exact versions of the workflow environment (pip constraints), tested on CPython 3.11."; \
	  echo "# Regenerate with 'make lock' after changing pyproject.toml; envs/*.yaml carry the same pins."; \
	  $(BIN)/pip freeze --exclude-editable | sed 's/^torch==\([0-9.]*\)+.*/torch==\1/' ) > requirements.lock

clean:
	rm -rf results/ci results/cpu figures logs .snakemake
