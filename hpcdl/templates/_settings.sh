# --- Settings --------------------------------------------------------------------------------------
# Each has a default here and can be overridden by exporting it before sbatch (sbatch hands the
# submitting shell's environment to the job). Commented lines are examples that are off.
{{exports}}

{{> software}}
