"""The benchmarks whose output is committed in results/ and cited there. Each runs as a module
from the repository's root, ``python -m benchmarks.NAME``, with the venv's Python, which has
hpcdl installed: none changes the import path."""
