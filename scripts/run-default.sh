#!/usr/bin/env bash
# Run the default local scaling studies (expmlp strong and cnn weak scaling at 1 and 2 ranks, one
# thread per rank) through mpirun and write each one's report: tables, plots and the model.
#
# Results go to $RESULTS_ROOT/<study>/ (default build/results, so every run measures afresh; the
# committed results/ were made with RESULTS_ROOT=results). Points already recorded there are
# skipped, so an interrupted run continues where it stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
RESULTS_ROOT="${RESULTS_ROOT:-build/results}"
STUDIES=("$@")
[ ${#STUDIES[@]} -gt 0 ] || STUDIES=(jobs/local-expmlp-strong.toml jobs/local-cnn-weak.toml)
for study in "${STUDIES[@]}"; do
    echo "== $study"
    python -m hpcdl study run "$study" --results-root "$RESULTS_ROOT"
    name="$(basename "$study" .toml)"
    python -m hpcdl study report "$RESULTS_ROOT/$name"
    # The scaling table, as it stands in the report.
    sed -n '/^## .*scaling/,/^CSV/p' "$RESULTS_ROOT/$name/report.md"
    # The forecast, as it stands in the report.
    sed -n '/^### Forecast/,/^Inputs measured/p' "$RESULTS_ROOT/$name/report.md"
done
