"""`hpcdl train`: the options, the run skeleton and the ways of training (docs/architecture.md)."""
