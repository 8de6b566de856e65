"""Launch ranks: locally through mpirun, on a cluster through Slurm."""
