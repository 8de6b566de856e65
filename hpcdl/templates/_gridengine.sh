export HPCDL_STOP_FILE="$CKPT_DIR/STOP"   # the file the ranks watch; the USR1/USR2 trap creates it
mkdir -p "$CKPT_DIR"
# A job that exits 99 runs again under the same job id: the attempt that stopped leaves its id in
# REQUEUED, and the next attempt resumes from the checkpoint it wrote.
if [ "$(cat "$CKPT_DIR/REQUEUED" 2>/dev/null)" = "${JOB_ID:-none}" ] || [ "${HPCDL_RESUME:-0}" = 1 ]; then
    TRAIN+=(--resume)
else
    # A fresh run must not resume from checkpoints an older run left in the same directory.
    rm -f "$CKPT_DIR"/ckpt-*.hpcdl
fi
rm -f "$HPCDL_STOP_FILE" "$CKPT_DIR/INTERRUPTED" "$CKPT_DIR/REQUEUED"

{{> qsub_launch}}

say() { echo "[hpcdl-job $(date +%T)] job ${JOB_ID:-?}: $*" >&2; }
on_stop() {
    trapped=1   # the wait below was cut short: it waits again
    say "$1: asking the ranks to checkpoint and stop"
    touch "$HPCDL_STOP_FILE"
}
trap 'on_stop USR1' USR1
trap 'on_stop USR2' USR2

say "start on $(awk '{printf "%s%s", s, $1; s=","}' "${PE_HOSTFILE:-/dev/null}") (${NSLOTS:-?} slots)"
{{> ranks}}

if [ "$rc" = 75 ]; then
    say "training checkpointed and stopped early (exit 75): exit 99, so that Grid Engine queues it again"
    echo "${JOB_ID:-none}" >"$CKPT_DIR/REQUEUED"
    exit 99
fi
say "training ended with exit status $rc"
exit "$rc"
