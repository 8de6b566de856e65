# {{ranks_per_node}} rank(s) per node (one per GPU on GPU nodes). Open MPI's mpirun reads the
# granted hosts from $PE_HOSTFILE and starts its daemons on them with `qrsh -inherit` (tight
# integration: Grid Engine accounts and ends them with the job), passing on the -x variables.
FORWARD=()
for name in {{forward}}; do
    if [ -n "${!name+x}" ]; then FORWARD+=(-x "$name"); fi
done
LAUNCH=(mpirun -npernode {{ranks_per_node}} -np {{ranks}} --bind-to none "${FORWARD[@]}")
