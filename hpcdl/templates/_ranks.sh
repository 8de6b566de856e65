"${LAUNCH[@]}" "${TRAIN[@]}" &
pid=$!
# A trapped signal ends `wait` early with the signal's status (> 128), the ranks still running
# or ended while the trap ran: wait again, for the launcher's own status. (Asking whether it still
# runs would lose that status when it ended during the trap; and a wait for a status already
# collected relies on the shell keeping it, which POSIX does not ask: an unknown pid gives 127.)
while :; do
    trapped=0
    rc=0
    wait "$pid" || rc=$?
    if [ "$trapped" = 0 ] || [ "$rc" -le 128 ]; then break; fi
done
rm -f "$HPCDL_STOP_FILE"
# Rank 0 writes INTERRUPTED once its checkpoint is durable. The launcher's status can hide the
# clean stop: when the first rank exits 75, the launcher ends the rest, whose status (143 for a
# TERM) is then the launcher's.
if [ "$rc" != 0 ] && [ -f "$CKPT_DIR/INTERRUPTED" ]; then rc=75; fi
rm -f "$CKPT_DIR/INTERRUPTED"
