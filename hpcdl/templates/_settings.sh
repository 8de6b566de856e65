# --- Settings --------------------------------------------------------------------------------------
# {{override}}
{{exports}}

{{> software}}
# When this attempt of the job began: the record bounds the run with it and the time it is written,
# so a report can tell whether two runs overlapped in time.
export HPCDL_JOB_STARTED="$(date -u +%Y-%m-%dT%H:%M:%S+00:00)"
