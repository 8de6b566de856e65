#!/usr/bin/env bash
# Regenerate results/bench/ on this machine from the committed code (make bench):
#   allreduce.txt / .jsonl   SWEEPS full sweeps on 2 ranks, every backend and compression
#   fit.txt / fit.json       the alpha-beta-gamma fit on the median of those sweeps
#   targets.txt              the allreduce targets, medians of same-sweep ratios
#   loop-overhead.txt        hpcdl train against the bare Horovod loop, alternating rounds
#   timeline-cost.txt        hpcdl train with and without Horovod's timeline, alternating rounds
# Each .txt starts with the command that made it and the commit. Refuses to run while hpcdl/ has
# uncommitted changes: results/ holds what committed code made. PARTS="sweeps", "loop" or
# "timeline" remakes only those files (default: all three).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
SWEEPS="${SWEEPS:-3}"
LOOP_ROUNDS="${LOOP_ROUNDS:-5}"
PARTS="${PARTS:-sweeps loop timeline}"
OUT=results/bench
if [ -n "$(git status --porcelain -uno -- hpcdl scripts benchmarks)" ]; then
    echo "bench: hpcdl/, scripts/ or benchmarks/ has uncommitted changes: commit them first" >&2
    exit 2
fi
COMMIT="$(git rev-parse HEAD)"
mkdir -p "$OUT"

header() {   # the command that makes a file, and where it ran
    printf '# command: %s\n# commit: %s (hpcdl/ clean); %s; %s CPUs; %s\n' "$1" "$COMMIT" \
        "$(uname -sr)" "$(nproc)" "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
}

t0=$(date +%s)
if [[ " $PARTS " == *" sweeps "* ]]; then
    rm -f "$OUT"/allreduce.txt "$OUT"/allreduce.jsonl "$OUT"/fit.txt "$OUT"/fit.json "$OUT"/targets.txt
    for i in $(seq 1 "$SWEEPS"); do
        cmd="mpirun -np 2 python -m hpcdl bench allreduce --backend all --tag sweep-$i/$SWEEPS"
        echo "== [$(( $(date +%s) - t0 )) s] sweep $i of $SWEEPS" >&2
        { header "$cmd"; $cmd; echo; } >> "$OUT/allreduce.txt"
    done
    cmd="python -m hpcdl bench fit --records $SWEEPS"
    { header "$cmd"; $cmd; } > "$OUT/fit.txt"
    cmd="python -m benchmarks.targets --records $SWEEPS"
    { header "$cmd"; $cmd; } > "$OUT/targets.txt"
fi
if [[ " $PARTS " == *" loop "* ]]; then
    echo "== [$(( $(date +%s) - t0 )) s] the training loop against the bare Horovod loop" >&2
    cmd="python -m benchmarks.loop_overhead --rounds $LOOP_ROUNDS"
    { header "$cmd"; $cmd; } > "$OUT/loop-overhead.txt"
fi
if [[ " $PARTS " == *" timeline "* ]]; then
    echo "== [$(( $(date +%s) - t0 )) s] the training loop with and without Horovod's timeline" >&2
    cmd="python -m benchmarks.timeline_cost --rounds 9"
    { header "$cmd"; $cmd; } > "$OUT/timeline-cost.txt"
fi
echo "== [$(( $(date +%s) - t0 )) s] done: $(ls "$OUT" | tr '\n' ' ')" >&2
