"""Fixtures for in-process runs of tools/*.py and the Runner (shared with tests/engine).

``tiny_run`` imports by name: pytest.ini puts tests/tools on the path (``pythonpath``).
"""
from tiny_run import isolated_run_state  # noqa: F401
