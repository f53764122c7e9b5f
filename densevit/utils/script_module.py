"""Import a script of ``tools/`` or ``benchmarks/`` (folders that are not packages) as a
module, so that one script can call another's functions."""
import importlib.util
from pathlib import Path


def load_script(path, name=None):
    """The Python file at ``path`` executed as a module named ``name`` (default:
    ``densevit_script_<file stem>``)."""
    path = Path(path)
    spec = importlib.util.spec_from_file_location(name or f'densevit_script_{path.stem}', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
