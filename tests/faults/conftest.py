"""Same fixtures as tests/tools (``tiny_run`` imports by name: see ``pythonpath`` in pytest.ini)."""
from tiny_run import isolated_run_state  # noqa: F401
