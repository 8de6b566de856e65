# The README's two commands: `make run` and `make test`. Each runs the (idempotent) set-up first.
PY := .venv/bin/python
export PATH := $(CURDIR)/.venv/bin:$(PATH)

.PHONY: setup setup-slurm run test test-unit test-tf2.15 bench

setup:
	bash scripts/setup.sh

# The real-cluster tests need Debian's Slurm packages; installed when root, skipped otherwise.
setup-slurm:
	HPCDL_WITH_SLURM=1 bash scripts/setup.sh

run: setup
	bash scripts/run-default.sh

# Both stacks: the whole suite on the default one, then the MPI tests on the other (scripts/test.sh;
# HPCDL_OTHER_STACK=none for the default stack alone). 22-25 min on a fresh clone of a 2-core Zen 3
# machine with the wheels cached, 30-35 on a day the host ran slower (docs/training.md).
test: setup-slurm
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
