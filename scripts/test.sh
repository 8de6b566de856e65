#!/usr/bin/env bash
# Both stacks: the whole suite on the default stack (.venv), then the MPI tests on the other
# TensorFlow stack (.venv-<stack>, set up here the first time; `make test-tf2.15` alone runs only
# that part). One after the other: run side by side on two cores, the ranks of both starve each
# other and timing assertions fail (docs/training.md). Fails if either part fails; arguments go to
# the default stack's pytest.
#
#   HPCDL_OTHER_STACK=none bash scripts/test.sh   # the default stack only (what `make test` runs)
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

"$PY" -m pytest "$@"
rc=$?
if [[ "$other" == none ]]; then
    echo "[test] the default stack only (HPCDL_OTHER_STACK=none, or .venv is not one of hpcdl's stacks)"
    exit "$rc"
fi

venv=".venv-$other"
echo "[test] the MPI tests on the $other stack, in $venv (HPCDL_OTHER_STACK=none leaves them out)"
t0=$SECONDS
if HPCDL_STACK="$other" HPCDL_VENV="$venv" bash scripts/setup.sh; then
    PATH="$PWD/$venv/bin:$PATH" "$venv/bin/python" -m pytest tests/mpi -p no:cacheprovider
    orc=$?
else
    orc=$?
    echo "[test] the $other stack's set-up failed (exit $orc)" >&2
fi
echo "[test] the $other stack took $((SECONDS - t0)) s with its set-up; the default stack's suite" \
     "$([[ $rc == 0 ]] && echo passed || echo "FAILED (pytest exit $rc)")"
if [[ "$rc" != 0 ]]; then exit "$rc"; fi
exit "$orc"
