# The README's two commands: `make run` and `make test`. Each runs the (idempotent) set-up first.
PY := .venv/bin/python
export PATH := $(CURDIR)/.venv/bin:$(PATH)

.PHONY: setup setup-slurm run test test-unit bench

setup:
	bash scripts/setup.sh

# The real-cluster tests need Debian's Slurm packages; installed when root, skipped otherwise.
setup-slurm:
	HPCDL_WITH_SLURM=1 bash scripts/setup.sh

run: setup
	bash scripts/run-default.sh

test: setup-slurm
	$(PY) -m pytest

test-unit: setup
	$(PY) -m pytest tests/unit

# Regenerate results/bench/ on this machine from the committed code (about 30 minutes).
bench: setup
	bash scripts/bench.sh
