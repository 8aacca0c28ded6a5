"""NVTX injection for SGLang EAGLE workers, loaded inside the profiled process.

Stage: capture, inside the workload. Input: the environment (TRACEDIFF_NVTX_SHIM); output: NVTX
push/pop ranges around the speculative worker's methods, so that nsys sees one `cycle` range per
decode step with `draft`, `verify` and `draft_extend` inside, without modifying SGLang.

Loaded by this folder's `sitecustomize.py` in every Python process that has the folder first on
PYTHONPATH, including SGLang's scheduler/TP subprocesses (spawned or forked). It installs a
`sys.meta_path` finder that patches the classes right after their module executes, so nothing is
imported early. Standard library only, plus torch or `nvtx` when the process already has them.

Environment:
    TRACEDIFF_NVTX_SHIM       target set to patch ("sglang-eagle"); unset or empty: do nothing
    TRACEDIFF_NVTX_BACKEND    "auto" (torch.cuda.nvtx, else the nvtx package), "torch" or "nvtx"
    TRACEDIFF_SHIM_DEBUG      "1": say on stderr what was patched
"""

from __future__ import annotations

import functools
import importlib.abc
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, NamedTuple


class Target(NamedTuple):
    """One method to wrap in an NVTX range."""

    module: str
    cls: str
    method: str
    range_name: str  # "cycle" is special: decode steps only; prefill calls are named "prefill"
    api: str  # "v1" (EAGLEWorker) or "v2" (EAGLEWorkerV2 / EagleDraftWorker)


_V1 = "sglang.srt.speculative.eagle_worker"
_V2 = "sglang.srt.speculative.eagle_worker_v2"

TARGETS: dict[str, tuple[Target, ...]] = {
    "sglang-eagle": (
        # domain-reference §4.2; SGLang <= 0.5.x before SpecV2 became the only worker
        Target(_V1, "EAGLEWorker", "forward_batch_generation", "cycle", "v1"),
        Target(_V1, "EAGLEWorker", "draft", "draft", "v1"),
        Target(_V1, "EAGLEWorker", "verify", "verify", "v1"),
        Target(_V1, "EAGLEWorker", "forward_draft_extend_after_decode", "draft_extend", "v1"),
        # SpecV2 (the only EAGLE worker in 0.5.23)
        Target(_V2, "EAGLEWorkerV2", "forward_batch_generation", "cycle", "v2"),
        Target(_V2, "EAGLEWorkerV2", "verify", "verify", "v2"),
        Target(_V2, "EagleDraftWorker", "draft", "draft", "v2"),
        Target(_V2, "EagleDraftWorker", "_draft_extend_for_decode", "draft_extend", "v2"),
    ),
}

_PATCHED_FLAG = "__tracediff_nvtx__"


def _debug(msg: str) -> None:
    if os.environ.get("TRACEDIFF_SHIM_DEBUG") == "1":
        print(f"tracediff-shim[{os.getpid()}]: {msg}", file=sys.stderr, flush=True)


def nvtx_backend(
    choice: str = "auto",
) -> tuple[str, Callable[[str], Any], Callable[[], Any]] | None:
    """(name, push, pop) for the first usable NVTX binding, or None."""
    if choice in ("auto", "torch"):
        try:
            import torch.cuda.nvtx as tnvtx
            from torch._C import _nvtx  # noqa: F401  (absent in CPU-only builds: stubs that raise)

            return "torch", tnvtx.range_push, tnvtx.range_pop
        except Exception:
            if choice == "torch":
                return None
    if choice in ("auto", "nvtx"):
        try:
            import nvtx

            return "nvtx", lambda name: nvtx.push_range(name), nvtx.pop_range
        except Exception:
            return None
    return None


def _is_prefill(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a forward_batch_generation call is a prefill/extend step, not a decode cycle."""
    batch = args[0] if args else kwargs.get("batch", kwargs.get("model_worker_batch"))
    try:
        if getattr(batch, "is_extend_in_batch", False) is True:
            return True
        mode = getattr(batch, "forward_mode", None)
        return bool(mode is not None and mode.is_extend())
    except Exception:
        return False


def wrap(
    func: Callable[..., Any], range_name: str, push: Callable[[str], Any], pop: Callable[[], Any]
) -> Callable[..., Any]:
    """`func` inside a push/pop range; the range is popped even when `func` raises."""

    @functools.wraps(func)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        name = range_name
        if range_name == "cycle" and _is_prefill(args, kwargs):
            name = "prefill"
        push(name)
        try:
            return func(self, *args, **kwargs)
        finally:
            pop()

    setattr(wrapper, _PATCHED_FLAG, range_name)
    return wrapper


def patch_module(
    module: Any,
    targets: tuple[Target, ...],
    backend: str = "auto",
    binding: tuple[str, Callable[[str], Any], Callable[[], Any]] | None = None,
) -> list[str]:
    """Wrap each target method defined in `module`; return 'Class.method' for those patched.

    `binding` (name, push, pop) overrides the NVTX backend (tests record calls with it)."""
    mine = [t for t in targets if t.module == module.__name__]
    if not mine:
        return []
    found = binding or nvtx_backend(backend)
    if found is None:
        print(
            f"tracediff-shim: no NVTX binding (torch or nvtx) in {sys.executable}; "
            f"{module.__name__} left unannotated",
            file=sys.stderr,
            flush=True,
        )
        return []
    _, push, pop = found
    done = []
    for t in mine:
        cls = getattr(module, t.cls, None)
        func = getattr(cls, t.method, None) if cls is not None else None
        if func is None or getattr(func, _PATCHED_FLAG, None):
            continue
        setattr(cls, t.method, wrap(func, t.range_name, push, pop))
        done.append(f"{t.cls}.{t.method}")
    _debug(f"patched {module.__name__}: {', '.join(done) or 'nothing'} ({found[0]})")
    return done


class _Loader(importlib.abc.Loader):
    """Runs the real loader, then patches the freshly executed module."""

    def __init__(self, inner: Any, targets: tuple[Target, ...], backend: str) -> None:
        self._inner = inner
        self._targets = targets
        self._backend = backend

    def create_module(self, spec: Any) -> Any:
        return self._inner.create_module(spec)

    def __getattr__(self, name: str) -> Any:  # get_source, is_package, get_resource_reader...
        return getattr(self._inner, name)

    def exec_module(self, module: Any) -> None:
        self._inner.exec_module(module)
        # hand the module back its real loader: inspect/linecache/importlib.resources use it
        module.__loader__ = self._inner
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._inner
        try:
            patch_module(module, self._targets, self._backend)
        except Exception as e:  # never break the workload over an annotation
            print(f"tracediff-shim: could not patch {module.__name__}: {e!r}", file=sys.stderr)


class Finder(importlib.abc.MetaPathFinder):
    """Finds target modules through the other finders and swaps in a patching loader."""

    def __init__(self, targets: tuple[Target, ...], backend: str = "auto") -> None:
        self._targets = targets
        self._names = {t.module for t in targets}
        self._backend = backend
        self._busy = threading.local()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self._names or getattr(self._busy, "on", False):
            return None
        self._busy.on = True
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            self._busy.on = False
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _Loader(spec.loader, self._targets, self._backend)
        return spec


def install(environ: dict[str, str] | os._Environ[str] = os.environ) -> Finder | None:
    """Install the finder for the target set named in TRACEDIFF_NVTX_SHIM (idempotent)."""
    which = environ.get("TRACEDIFF_NVTX_SHIM", "").strip()
    if not which:
        return None
    targets = TARGETS.get(which)
    if targets is None:
        print(
            f"tracediff-shim: unknown TRACEDIFF_NVTX_SHIM={which!r} (known: {', '.join(TARGETS)})",
            file=sys.stderr,
        )
        return None
    for f in sys.meta_path:
        if isinstance(f, Finder):
            return f
    finder = Finder(targets, environ.get("TRACEDIFF_NVTX_BACKEND", "auto"))
    sys.meta_path.insert(0, finder)
    # a module imported before us (unlikely at startup) is patched in place
    for name in finder._names:
        if name in sys.modules:
            patch_module(sys.modules[name], targets, finder._backend)
    _debug(f"installed for {which} in {sys.executable}")
    return finder
