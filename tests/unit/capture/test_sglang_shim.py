"""The SGLang NVTX shim: its targets exist in the pinned SGLang, and it wraps them correctly.

The signature check reads the real SGLang wheels (downloaded once with `pip download --no-deps`,
cached under the temp folder) with `ast`. A failed download fails the test: the check must not
silently stop guarding the shim.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tempfile
import textwrap
import types
import zipfile
from pathlib import Path

import pytest

from capture.presets import sglang_eagle3 as preset
from capture.shim import tracediff_nvtx_shim as shim

SHIM_DIR = Path(shim.__file__).parent
CACHE = Path(tempfile.gettempdir()) / "tracediff-sglang-wheels"


def sglang_wheel(version: str) -> Path:
    folder = CACHE / version
    found = sorted(folder.glob(f"sglang-{version}-*.whl"))
    if not found:
        folder.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                f"sglang=={version}",
                "-d",
                str(folder),
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        found = sorted(folder.glob(f"sglang-{version}-*.whl"))
        if proc.returncode != 0 or not found:
            pytest.fail(
                f"could not download sglang=={version} to check the shim against it "
                f"(pip exit {proc.returncode}: {proc.stderr.strip()[-500:]})"
            )
    return found[0]


def params(fn: ast.FunctionDef) -> list[str]:
    a = fn.args
    out = [p.arg for p in a.posonlyargs + a.args]
    if a.vararg:
        out.append("*" + a.vararg.arg)
    elif a.kwonlyargs:
        out.append("*")
    out += [p.arg for p in a.kwonlyargs]
    if a.kwarg:
        out.append("**" + a.kwarg.arg)
    return out


def methods(whl: zipfile.ZipFile, module: str, cls: str) -> dict[str, ast.FunctionDef]:
    path = module.replace(".", "/") + ".py"
    try:
        tree = ast.parse(whl.read(path))
    except KeyError:
        pytest.fail(f"{whl.filename}: no {path}: the shim's module moved")
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return {n.name: n for n in node.body if isinstance(n, ast.FunctionDef)}
    pytest.fail(f"{whl.filename}: {module} has no class {cls}")


@pytest.mark.parametrize("version", [preset.SGLANG_VERSION, preset.SGLANG_LEGACY_VERSION])
def test_patched_methods_exist_with_expected_signatures(version: str) -> None:
    with zipfile.ZipFile(sglang_wheel(version)) as whl:
        for (module, cls, method), expected in preset.EXPECTED_SIGNATURES[version].items():
            found = methods(whl, module, cls)
            assert method in found, f"sglang {version}: {cls}.{method} is gone"
            assert params(found[method]) == expected, f"sglang {version}: {cls}.{method} changed"
        # the shim tells prefill from decode through ForwardMode.is_extend()
        fm = methods(whl, "sglang.srt.model_executor.forward_batch_info", "ForwardMode")
        assert "is_extend" in fm


def test_pinned_release_has_what_the_preset_launches() -> None:
    with zipfile.ZipFile(sglang_wheel(preset.SGLANG_VERSION)) as whl:
        names = set(whl.namelist())
        for mod in ("sglang.launch_server", *preset.BENCH_MODULES.values()):
            assert mod.replace(".", "/") + ".py" in names, mod
        http = whl.read("sglang/srt/entrypoints/http_server.py").decode()
        assert '"/start_profile"' in http and '"/health"' in http
        # /start_profile with activities ["CUDA_PROFILER"] opens nsys's cudaProfilerApi range
        prof = whl.read("sglang/srt/managers/scheduler_components/profiler_manager.py").decode()
        assert '"CUDA_PROFILER" in activities' in prof and "cudaProfilerStart()" in prof


def test_every_shim_target_is_checked_against_a_pinned_release() -> None:
    checked = {k for sigs in preset.EXPECTED_SIGNATURES.values() for k in sigs}
    targets = {(t.module, t.cls, t.method) for t in shim.TARGETS[preset.NVTX_SHIM]}
    assert targets == checked
    for sigs in preset.EXPECTED_SIGNATURES.values():
        for p in sigs.values():
            # the wrapper reads the batch from the first argument after self
            assert p[0] == "self" and p[1] in ("batch", "model_worker_batch")


# ---- behaviour, in process: a stand-in module with V2's call structure ----


class _Mode:
    def __init__(self, extend: bool) -> None:
        self._extend = extend

    def is_extend(self) -> bool:
        return self._extend


class _Batch:
    def __init__(self, extend: bool) -> None:
        self.forward_mode = _Mode(extend)
        self.is_extend_in_batch = False


def _fake_v2() -> types.ModuleType:
    mod = types.ModuleType("sglang.srt.speculative.eagle_worker_v2")

    class EagleDraftWorker:
        def draft(self, batch, *, with_topology=False):
            return "verify-input"

        def _draft_extend_for_decode(self, batch, batch_result, *, kv_loc_plan=None):
            if getattr(batch, "boom", False):
                raise RuntimeError("boom")

    class EAGLEWorkerV2:
        def __init__(self) -> None:
            self.draft_worker = EagleDraftWorker()

        def forward_batch_generation(
            self, batch, on_publish=None, grammar_barrier=None, pp_proxy_tensors=None
        ):
            if batch.forward_mode.is_extend():
                return "prefill-result"
            self.draft_worker.draft(batch)
            out = self.verify(batch, pp_proxy_tensors=None)
            self.draft_worker._draft_extend_for_decode(batch, out, kv_loc_plan=None)
            return out

        def verify(self, batch, pp_proxy_tensors=None, grammar_barrier=None):
            return "result"

    mod.EagleDraftWorker = EagleDraftWorker
    mod.EAGLEWorkerV2 = EAGLEWorkerV2
    return mod


def test_wrapped_worker_emits_cycle_with_phases_inside() -> None:
    events: list[str] = []
    mod = _fake_v2()
    binding = ("test", lambda name: events.append(f"push {name}"), lambda: events.append("pop"))
    done = shim.patch_module(mod, shim.TARGETS["sglang-eagle"], binding=binding)
    assert sorted(done) == [
        "EAGLEWorkerV2.forward_batch_generation",
        "EAGLEWorkerV2.verify",
        "EagleDraftWorker._draft_extend_for_decode",
        "EagleDraftWorker.draft",
    ]
    w = mod.EAGLEWorkerV2()
    assert w.forward_batch_generation(_Batch(extend=False)) == "result"
    assert events == [
        "push cycle",
        "push draft",
        "pop",
        "push verify",
        "pop",
        "push draft_extend",
        "pop",
        "pop",
    ]
    events.clear()
    assert w.forward_batch_generation(_Batch(extend=True)) == "prefill-result"
    assert events == ["push prefill", "pop"]
    # a raising phase still closes its ranges, so later cycles nest correctly
    events.clear()
    b = _Batch(extend=False)
    b.boom = True
    with pytest.raises(RuntimeError):
        w.forward_batch_generation(b)
    assert events.count("pop") == events.count("push cycle") + 3
    # patching twice does not wrap twice
    assert shim.patch_module(mod, shim.TARGETS["sglang-eagle"], binding=binding) == []


# ---- in a real interpreter: sitecustomize loads, the import hook patches, subprocesses too ----

_FAKE_V2 = """
class EagleDraftWorker:
    def draft(self, batch, *, with_topology=False): return None
    def _draft_extend_for_decode(self, batch, batch_result, *, kv_loc_plan=None): return None
class EAGLEWorkerV2:
    def forward_batch_generation(self, batch, on_publish=None, grammar_barrier=None,
                                 pp_proxy_tensors=None):
        return None
    def verify(self, batch, pp_proxy_tensors=None, grammar_barrier=None): return None
"""

_MAIN = """
import multiprocessing as mp, sys

def child(q):
    import sglang.srt.speculative.eagle_worker_v2 as m
    q.put(getattr(m.EAGLEWorkerV2.verify, "__tracediff_nvtx__", None))

if __name__ == "__main__":
    import sitecustomize
    print("shadowed sitecustomize ran:", getattr(sitecustomize, "MARK", None))
    import sglang.srt.speculative.eagle_worker_v2 as m
    print("parent:", getattr(m.EAGLEWorkerV2.forward_batch_generation, "__tracediff_nvtx__", None))
    import inspect
    assert "class EAGLEWorkerV2" in inspect.getsource(m)  # the real loader is back in place
    assert type(m.__loader__).__name__ == "SourceFileLoader", m.__loader__
    ctx = mp.get_context("spawn")
    q = ctx.Queue(); p = ctx.Process(target=child, args=(q,)); p.start()
    print("child:", q.get(timeout=60)); p.join()
"""


def _fake_tree(root: Path) -> None:
    pkg = root / "python" / "sglang" / "srt" / "speculative"
    pkg.mkdir(parents=True)
    for d in (pkg, pkg.parent, pkg.parent.parent):
        (d / "__init__.py").write_text("")
    (pkg / "eagle_worker_v2.py").write_text(_FAKE_V2)
    (root / "main.py").write_text(textwrap.dedent(_MAIN))
    (root / "other").mkdir()
    (root / "other" / "sitecustomize.py").write_text("MARK = 'yes'\n")


def _run_fake_tree(root: Path, **shim_env: str) -> subprocess.CompletedProcess[str]:
    """main.py of a `_fake_tree(root)`, the shim's folder first on PYTHONPATH, with no
    TRACEDIFF_ variable but `shim_env`'s."""
    _fake_tree(root)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEDIFF_")}
    env["PYTHONPATH"] = os.pathsep.join([str(SHIM_DIR), str(root / "python"), str(root / "other")])
    return subprocess.run(
        [sys.executable, "main.py"],
        cwd=root,
        env={**env, **shim_env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_shim_loads_in_spawned_subprocesses_and_chains_sitecustomize(tmp_path: Path) -> None:
    r = _run_fake_tree(
        tmp_path,
        TRACEDIFF_NVTX_SHIM="sglang-eagle",
        TRACEDIFF_NVTX_BACKEND="nvtx",
        TRACEDIFF_SHIM_DEBUG="1",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "shadowed sitecustomize ran: yes",
        "parent: cycle",
        "child: verify",
    ]
    patched = [
        ln for ln in r.stderr.splitlines() if "patched sglang.srt.speculative.eagle_worker_v2" in ln
    ]
    assert len(patched) == 2 and all("(nvtx)" in ln for ln in patched)  # parent and spawned child


def test_shim_is_inert_without_its_variable(tmp_path: Path) -> None:
    r = _run_fake_tree(tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "shadowed sitecustomize ran: yes",
        "parent: None",
        "child: None",
    ]
    assert "tracediff-shim" not in r.stderr
