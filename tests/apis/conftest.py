"""Same fixtures as tests/tools; makes tests/tools/tiny_run.py importable as ``tiny_run``."""
import sys
from pathlib import Path

_TOOLS_TESTS = str(Path(__file__).resolve().parents[1] / 'tools')
if _TOOLS_TESTS not in sys.path:
    sys.path.insert(0, _TOOLS_TESTS)

from tiny_run import isolated_run_state  # noqa: E402,F401
