# --- Settings --------------------------------------------------------------------------------------
# Each has a default here and can be overridden by exporting it before sbatch (sbatch hands the
# submitting shell's environment to the job). Commented lines are examples that are off.
{{exports}}

{{> software}}
# When this attempt of the job began: the record bounds the run with it and the time it is written,
# so a report can tell whether two runs overlapped in time.
export HPCDL_JOB_STARTED="$(date -u +%Y-%m-%dT%H:%M:%S+00:00)"
