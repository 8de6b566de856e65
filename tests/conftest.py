"""Put the repository and the test helpers (tests/hpcdl_testing.py) on sys.path for every test."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
