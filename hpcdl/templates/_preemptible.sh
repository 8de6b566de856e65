export HPCDL_STOP_FILE="$CKPT_DIR/STOP"   # the file the ranks watch; the USR1 trap creates it
mkdir -p "$CKPT_DIR"
if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] || [ "${HPCDL_RESUME:-0}" = 1 ]; then
    # Requeued (or told to continue an earlier job): go on from the newest good checkpoint.
    TRAIN+=(--resume)
else
    # A fresh run must not resume from checkpoints an older run left in the same directory.
    rm -f "$CKPT_DIR"/ckpt-*.hpcdl
fi
rm -f "$HPCDL_STOP_FILE" "$CKPT_DIR/INTERRUPTED"   # left behind by the attempt that was stopped

case "$HPCDL_LAUNCHER" in
    srun)   # srun of Slurm 22.05 does not take --cpus-per-task from the job: pass it on.
            # --kill-on-bad-exit: a rank that dies ends the step at once instead of leaving the
            # others blocked in an allreduce until Horovod's stall shutdown.
            LAUNCH=(srun --mpi="$HPCDL_SRUN_MPI" --kill-on-bad-exit=1 ${SLURM_CPUS_PER_TASK:+--cpus-per-task=$SLURM_CPUS_PER_TASK}) ;;
    mpirun) LAUNCH=(mpirun -np "$SLURM_NTASKS" -npernode "${SLURM_NTASKS_PER_NODE:-1}" --bind-to none) ;;
    *)      echo "error: HPCDL_LAUNCHER must be srun or mpirun, not '$HPCDL_LAUNCHER'" >&2; exit 2 ;;
esac

say() { echo "[hpcdl-job $(date +%T)] job ${SLURM_JOB_ID:-?}: $*" >&2; }
on_usr1() {
    trapped=1   # the wait below was cut short: it waits again
    say "USR1: asking the ranks to checkpoint and stop"
    touch "$HPCDL_STOP_FILE"
}
trap on_usr1 USR1

say "start on ${SLURM_JOB_NODELIST:-?} (attempt $(( ${SLURM_RESTART_COUNT:-0} + 1 )), launcher $HPCDL_LAUNCHER)"
{{> ranks}}

if [ "$rc" = 75 ]; then
    say "training checkpointed and stopped early (exit 75): requeueing"
    if scontrol requeue "$SLURM_JOB_ID"; then
        exit 0
    fi
    say "requeue refused: resubmit this script with HPCDL_RESUME=1 to continue from the checkpoint"
fi
say "training ended with exit status $rc"
exit "$rc"
