"""Fixtures for in-process runs of tools/*.py and the Runner (shared with tests/engine)."""
import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from tiny_run import isolated_run_state  # noqa: E402,F401
