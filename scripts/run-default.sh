#!/usr/bin/env bash
# Train the cnn workload at 1 and 2 ranks (one thread per rank) and print the weak-scaling speedup.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH" HPCDL_THREADS="${HPCDL_THREADS:-1}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ARGS=(train --workload cnn --model "${MODEL:-small}" --image-size "${IMAGE_SIZE:-64}" --batch-size 32
      --num-warmup-batches 3 --num-batches-per-iter 5 --num-iters 6 --results results/runs.jsonl)
rates=()
for np in 1 2; do
    echo "== $np rank(s)"
    out="$(timeout 600 mpirun -np "$np" --bind-to none python -m hpcdl "${ARGS[@]}")"
    printf '%s\n' "$out"
    rates+=("$(printf '%s\n' "$out" | sed -n 's/^Total img\/sec on [0-9]* rank(s): \([0-9.]*\).*/\1/p')")
done
python - "${rates[@]}" <<'PY'
import sys
x1, x2 = map(float, sys.argv[1:3])
print(f"Speedup at 2 ranks (weak scaling, same per-rank batch): {x2 / x1:.2f}x, efficiency {x2 / x1 / 2 * 100:.0f}%")
PY
