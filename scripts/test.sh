#!/usr/bin/env bash
# `make test`: the whole suite on the default stack (.venv), and beside it, at the same time, the
# MPI tests on the other TensorFlow stack (.venv-<stack>, set up here the first time).
#
# The suite alone keeps about 1.4 of two cores busy (its MPI tests wait on rank start-up, its
# Slurm and box tests on the scheduler), so the other stack's set-up and MPI tests run in the
# cores it leaves idle rather than after it (docs/training.md has the figures). Their output goes
# to build/test-<stack>.log; its summary is printed at the end, and `make test` fails if either
# run fails. Arguments go to the default stack's pytest.
#
#   HPCDL_OTHER_STACK=none make test      # the default stack only
#   HPCDL_OTHER_STACK=tf2.15 make test    # name the other stack (default: the one .venv is not)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python

stack="$("$PY" -c 'from hpcdl import stack; print(stack.setup_facts().get("stack") or "")')"
case "$stack" in
    tf2.21) other=tf2.15 ;;
    tf2.15) other=tf2.21 ;;
    *) other=none ;;   # a cluster module's TensorFlow: no stack of hpcdl's own to pair it with
esac
other="${HPCDL_OTHER_STACK:-$other}"

bpid=""
stop_other() {
    if [[ -n "$bpid" ]] && kill -0 "$bpid" 2>/dev/null; then
        kill -TERM -- "-$bpid" 2>/dev/null
        wait "$bpid" 2>/dev/null
    fi
}
trap stop_other EXIT
trap 'exit 130' INT TERM

if [[ "$other" != none ]]; then
    venv=".venv-$other"
    log="build/test-$other.log"
    mkdir -p build
    echo "[test] the MPI tests on the $other stack run beside this suite, in $venv; log: $log"
    # its own session (setsid), so that an interrupted `make test` ends its ranks too
    setsid bash -c '
        HPCDL_STACK="$1" HPCDL_VENV="$2" bash scripts/setup.sh || exit 64
        PATH="$PWD/$2/bin:$PATH" exec "$2/bin/python" -m pytest tests/mpi -p no:cacheprovider
    ' _ "$other" "$venv" > "$log" 2>&1 &
    bpid=$!
else
    echo "[test] only the $stack stack (HPCDL_OTHER_STACK=none, or no stack of hpcdl's own in .venv)"
fi

"$PY" -m pytest "$@"
rc=$?

[[ "$other" == none ]] && exit "$rc"
t0=$SECONDS
if kill -0 "$bpid" 2>/dev/null; then
    echo "[test] waiting for the MPI tests on the $other stack ($log)"
fi
wait "$bpid"
orc=$?
bpid=""
echo "[test] the MPI tests on the $other stack (waited $((SECONDS - t0)) s after this suite):"
if [[ "$orc" == 64 ]]; then
    echo "[test] its set-up failed (HPCDL_OTHER_STACK=none skips it); the end of $log:"
    tail -n 30 "$log"
elif [[ "$orc" != 0 ]]; then
    grep -E "^(FAILED|ERROR) " "$log" || true
    tail -n 1 "$log"
else
    tail -n 1 "$log"
fi
if [[ "$rc" != 0 ]]; then exit "$rc"; fi
exit "$orc"
