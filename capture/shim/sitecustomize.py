"""tracediff's sitecustomize: installs the NVTX shim, then runs the sitecustomize it shadows.

Put this folder first on PYTHONPATH (tracediff capture does) and every Python process of the
workload, subprocesses included, loads it at startup. Standard library only; never raises.
"""

import importlib.machinery
import importlib.util
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))

try:
    if _here not in sys.path:
        sys.path.insert(0, _here)
    import tracediff_nvtx_shim

    tracediff_nvtx_shim.install()
except Exception as _e:  # an annotation must never stop the workload
    print(f"tracediff-shim: not installed: {_e!r}", file=sys.stderr)


def _chain() -> None:
    """Run the next sitecustomize on sys.path (a distro's or a venv's), which ours shadows."""
    for entry in sys.path:
        if os.path.abspath(entry or ".") == _here:
            continue
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [entry])
        if spec is None or spec.loader is None:
            continue
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)
        return


try:
    _chain()
except Exception as _e:
    print(f"tracediff-shim: the shadowed sitecustomize failed: {_e!r}", file=sys.stderr)
