#!/usr/bin/env bash
# Both stacks: the whole suite on the default stack (.venv), then the MPI tests marked stacks on
# the other TensorFlow stack (.venv-<stack>; tests/hpcdl_testing.py OTHER_STACK says which and
# why; `make test-tf2.15` runs every MPI test there). Tests that time
# something run one after the other: side by side on two cores, the ranks of two MPI tests starve
# each other and timing assertions fail (docs/training.md). Work that times nothing runs beside
# them in a session of its own at the lowest CPU priority, so that it takes only the CPU they
# leave idle: the other stack's set-up (its wheels and Horovod's build, 200 s on a fresh 2-core
# machine; log .venv-<stack>.setup.log), and the default stack's unit tests (log
# .test-unit.log), beside the Slurm and box tests, which wait on the scheduler much of their time,
# then the MPI tests. Fails if any part fails. Arguments go to one pytest of the default stack in
# the foreground instead of the split above.
#
# `make test-all` (and so CI) runs this after the set-up; `make test` runs the quick tier through
# it (HPCDL_OTHER_STACK=none, -m quick).
#
#   HPCDL_OTHER_STACK=none bash scripts/test.sh   # the default stack only
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

venv=".venv-$other"
bg=()
trap 'for p in "${bg[@]}"; do kill -- -"$p" 2>/dev/null; done' EXIT
# `low CMD... &`: CMD in a session, and so a scheduler autogroup, of its own, whose nice 19 weighs
# 15 against the foreground's 1024 (where autogroups are off, the nice of each process does the
# same). exec: the background job's pid is the session's, which the EXIT trap kills.
low() {
    exec setsid -w bash -c 'echo 19 > /proc/self/autogroup 2>/dev/null; exec nice -n 19 "$@"' _ "$@"
}
if [[ "$other" != none ]]; then
    echo "[test] setting the $other stack up in $venv beside the suite (log: $venv.setup.log)"
    low env HPCDL_STACK="$other" HPCDL_VENV="$venv" bash scripts/setup.sh \
        > "$venv.setup.log" 2>&1 < /dev/null &
    setup_pid=$!
    bg+=("$setup_pid")
fi
t0=$SECONDS
if [[ $# -gt 0 ]]; then
    "$PY" -m pytest "$@"
    rc=$?
else
    echo "[test] the unit tests beside the Slurm, box and MPI tests (log: .test-unit.log)"
    low "$PY" -m pytest tests/unit -m "not timed" -p no:cacheprovider > .test-unit.log 2>&1 \
        < /dev/null &
    unit_pid=$!
    bg+=("$unit_pid")
    # with the unit tests that time CPU scheduling (marked timed), which nice 19 would starve
    "$PY" -m pytest tests/box tests/slurm tests/mpi tests/unit -m "not unit or timed"
    rc=$?
    tu=$SECONDS
    wait "$unit_pid"
    urc=$?
    cat .test-unit.log
    echo "[test] the unit tests ended $((SECONDS - tu)) s after the others (exit $urc)"
    [[ $rc == 0 ]] && rc=$urc
fi
if [[ "$other" == none ]]; then
    echo "[test] the default stack only (HPCDL_OTHER_STACK=none, or .venv is not one of hpcdl's stacks)"
    exit "$rc"
fi

echo "[test] the default stack's suite took $((SECONDS - t0)) s; the MPI tests on the $other" \
     "stack, in $venv, next (HPCDL_OTHER_STACK=none leaves them out)"
t1=$SECONDS
if wait "$setup_pid"; then
    echo "[test] its set-up: $(tail -n 1 "$venv.setup.log"), beside the suite;" \
         "waited $((SECONDS - t1)) s"
    PATH="$PWD/$venv/bin:$PATH" "$venv/bin/python" -m pytest tests/mpi -m stacks \
        -p no:cacheprovider
    orc=$?
else
    orc=$?
    tail -n 20 "$venv.setup.log" >&2
    echo "[test] the $other stack's set-up failed (exit $orc; log $venv.setup.log)" >&2
fi
trap - EXIT
verdict="$([[ $rc == 0 ]] && echo passed || echo "FAILED (pytest exit $rc)")"
echo "[test] the $other stack's MPI tests took $((SECONDS - t1)) s with the wait for its" \
     "set-up; the default stack's suite $verdict"
if [[ "$rc" != 0 ]]; then exit "$rc"; fi
exit "$orc"
