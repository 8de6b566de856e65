# The README's two commands: `make run` and `make test` (and `make test-all`, what CI runs). Each
# runs the (idempotent) set-up first.
PY := .venv/bin/python
export PATH := $(CURDIR)/.venv/bin:$(PATH)

.PHONY: setup setup-slurm run test test-all test-unit test-tf2.15 bench hooks

setup:
	bash scripts/setup.sh

# The real-cluster tests need Debian's Slurm packages; installed when root, skipped otherwise.
setup-slurm:
	HPCDL_WITH_SLURM=1 bash scripts/setup.sh

run: setup
	bash scripts/run-default.sh

# The quick tier: every unit test, one MPI test of each training mode and backend, one Slurm run
# on the cluster box (tests/hpcdl_testing.py QUICK), on the default stack.
test: setup-slurm
	HPCDL_OTHER_STACK=none bash scripts/test.sh -m quick -p no:cacheprovider tests

# Every test on the default stack, then the MPI tests marked stacks on the other (scripts/test.sh;
# HPCDL_OTHER_STACK=none for the default stack alone). What CI runs.
test-all: setup-slurm
	bash scripts/test.sh

test-unit: setup
	$(PY) -m pytest tests/unit

# The MPI tier on the former stack (TensorFlow 2.15) alone, in the venv scripts/test.sh uses for it.
OTHER := $(CURDIR)/.venv-tf2.15
test-tf2.15:
	HPCDL_STACK=tf2.15 HPCDL_VENV=$(OTHER) bash scripts/setup.sh
	PATH=$(OTHER)/bin:$$PATH $(OTHER)/bin/python -m pytest tests/mpi

# Regenerate results/bench/ on this machine from the committed code (about 30 minutes).
bench: setup
	bash scripts/bench.sh

# For contributors (CONTRIBUTING.md): git checks each commit message's subject (scripts/commit-msg).
hooks:
	mkdir -p "$$(git rev-parse --git-path hooks)"
	ln -sf "$(CURDIR)/scripts/commit-msg" "$$(git rev-parse --git-path hooks)/commit-msg"
	@echo "commit-msg hook installed: subjects of at most 72 characters, then a blank line"
