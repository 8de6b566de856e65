"${LAUNCH[@]}" "${TRAIN[@]}" &
pid=$!
# A trapped signal ends `wait` early (status > 128) while the ranks still run: wait again until
# the launcher has ended, then once more for its own status (the shell keeps it), which a
# launcher that ended while the trap ran would otherwise lose to the signal's 138.
while kill -0 "$pid" 2>/dev/null; do
    wait "$pid" || :
done
rc=0
wait "$pid" || rc=$?
rm -f "$HPCDL_STOP_FILE"
# Rank 0 writes INTERRUPTED once its checkpoint is durable. The launcher's status can hide the
# clean stop: when the first rank exits 75, the launcher ends the rest, whose status (143 for a
# TERM) is then the launcher's.
if [ "$rc" != 0 ] && [ -f "$CKPT_DIR/INTERRUPTED" ]; then rc=75; fi
rm -f "$CKPT_DIR/INTERRUPTED"
