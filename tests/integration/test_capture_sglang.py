"""`--preset sglang-eagle3` under the real nsys, against a stand-in SGLang checkout.

The stand-in has SGLang's layout (python/sglang/...), entry points (launch_server with /health and
/start_profile, bench_one_batch_server) and EAGLEWorkerV2's call structure, with sleeps for work,
and its scheduler runs in a `spawn` subprocess like SGLang's. Nothing in it emits NVTX: every range
in the run comes from capture/shim, loaded by sitecustomize inside that subprocess.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.support.gitrepo import commit_files, git
from tracediff.runs.runfile import read_run

pytestmark = [pytest.mark.nsys, pytest.mark.git]

FILES = {
    "python/sglang/__init__.py": "",
    "python/sglang/srt/__init__.py": "",
    "python/sglang/srt/speculative/__init__.py": "",
    "python/sglang/srt/speculative/eagle_worker_v2.py": """
import time

class _Mode:
    def __init__(self, extend): self.extend = extend
    def is_extend(self): return self.extend

class Batch:
    def __init__(self, extend):
        self.forward_mode = _Mode(extend)
        self.is_extend_in_batch = False

class EagleDraftWorker:
    def draft(self, batch, *, with_topology=False):
        time.sleep(0.004)
    def _draft_extend_for_decode(self, batch, batch_result, *, kv_loc_plan=None):
        time.sleep(0.002)

class EAGLEWorkerV2:
    def __init__(self):
        self.draft_worker = EagleDraftWorker()
    def forward_batch_generation(self, batch, on_publish=None, grammar_barrier=None,
                                 pp_proxy_tensors=None):
        if batch.forward_mode.is_extend():
            time.sleep(0.003)
            return None
        self.draft_worker.draft(batch)
        out = self.verify(batch)
        self.draft_worker._draft_extend_for_decode(batch, out, kv_loc_plan=None)
        return out
    def verify(self, batch, pp_proxy_tensors=None, grammar_barrier=None):
        time.sleep(0.008)
""",
    "python/sglang/launch_server.py": """
import argparse, json, multiprocessing as mp, signal, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

def scheduler(jobs, done):
    from sglang.srt.speculative.eagle_worker_v2 import Batch, EAGLEWorkerV2
    w = EAGLEWorkerV2()
    done.put("ready")
    while (n := jobs.get()) is not None:
        w.forward_batch_generation(Batch(extend=True))
        for _ in range(n):
            w.forward_batch_generation(Batch(extend=False))
        done.put(n)

if __name__ == "__main__":
    p = argparse.ArgumentParser(); p.add_argument("--port", type=int)
    a, rest = p.parse_known_args()
    assert "--speculative-algorithm" in rest and "EAGLE3" in rest, rest
    ctx = mp.get_context("spawn")
    jobs, done = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=scheduler, args=(jobs, done)); proc.start()
    assert done.get(timeout=60) == "ready"
    class H(BaseHTTPRequestHandler):
        def log_message(self, *args): pass
        def _reply(self, code):
            self.send_response(code); self.end_headers(); self.wfile.write(b"{}")
        def do_GET(self):
            self._reply(200 if self.path == "/health" else 404)
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
            if self.path == "/start_profile":
                return self._reply(200 if body.get("activities") == ["CUDA_PROFILER"] else 400)
            if self.path == "/generate":
                jobs.put(body["cycles"]); done.get(timeout=60); return self._reply(200)
            self._reply(404)
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), H)
    def stop(*_):
        jobs.put(None); proc.join(30); sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    srv.serve_forever()
""",
    "python/sglang/bench_one_batch_server.py": """
import argparse, json, urllib.request
p = argparse.ArgumentParser()
p.add_argument("--base-url"); p.add_argument("--batch-size", type=int); a, _ = p.parse_known_args()
body = json.dumps({"cycles": a.batch_size}).encode()
req = urllib.request.Request(a.base_url + "/generate", data=body,
                             headers={"Content-Type": "application/json"})
urllib.request.urlopen(req, timeout=60).read()
print("latency: ok")
""",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stand_in(tmp_path: Path) -> Path:
    repo = tmp_path / "sglang"
    commit_files(repo, FILES, "stand-in")
    return repo


def _preset(repo: Path, out: Path, nsys: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tracediff",
            "capture",
            "--commit",
            "HEAD",
            "--repo",
            str(repo),
            "-o",
            str(out),
            "--nsys",
            nsys,
            *extra,
            "--preset",
            "sglang-eagle3",
            "--model",
            "m",
            "--draft-model",
            "d",
            "--python",
            sys.executable,
            "--port",
            str(_free_port()),
            "--batch-size",
            "6",
            "--warmup",
            "1",
            "--capture-range",
            "none",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _cycles(run_file: Path) -> dict[str, int]:
    n = pl.from_arrow(read_run(run_file).table("nvtx_ranges"))
    return dict(n.group_by("name").len().iter_rows())


def test_preset_annotates_eagle_cycles_in_the_scheduler_subprocess(
    nsys: str, tmp_path: Path
) -> None:
    repo = _stand_in(tmp_path)
    out = tmp_path / "cap"
    r = _preset(repo, out, nsys)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and "latency: ok" in r.stderr
    n = pl.from_arrow(read_run(out / "run.arrow").table("nvtx_ranges"))
    traced = n["domain"].cast(pl.String).str.starts_with("python:").fill_null(False)
    assert traced.any()  # the stand-in is small: its functions are traced for launch stacks
    n = n.filter(~traced)  # the shim's ranges: their depths do not count the traced functions
    counts = dict(n.group_by("name").len().iter_rows())
    # warm-up + measured run, 6 decode cycles and one prefill each
    assert counts == {"cycle": 12, "prefill": 2, "draft": 12, "verify": 12, "draft_extend": 12}
    assert set(n.filter(pl.col("name") == "cycle")["depth"]) == {0}
    assert set(n.filter(pl.col("name").is_in(["draft", "verify", "draft_extend"]))["depth"]) == {1}
    verify_ms = n.filter(pl.col("name") == "verify")["duration_ns"].median() / 1e6
    assert 7 < verify_ms < 20, verify_ms
    m = json.loads((out / "manifest.json").read_text())
    assert m["preset"] == "sglang-eagle3" and m["env"]["TRACEDIFF_NVTX_SHIM"] == "sglang-eagle"
    shim_dir, sglang_dir = m["env"]["PYTHONPATH"].split(os.pathsep)[:2]
    assert shim_dir.endswith("capture/shim") and sglang_dir == os.path.join(m["cwd"], "python")
    assert git(repo, "worktree", "list").count("\n") == 0


def test_preset_with_repeat_writes_a_run_set(nsys: str, tmp_path: Path) -> None:
    from tracediff.parse import sides
    from tracediff.runs import runset

    repo = _stand_in(tmp_path)
    out = tmp_path / "set"
    r = _preset(repo, out, nsys, "--repeat", "2")
    assert r.returncode == 0, r.stderr
    index = runset.read_index(out)
    assert index["workload"]["preset"] == "sglang-eagle3"
    assert index["workload"]["nvtx_shim"] == "sglang-eagle"
    assert [x["status"] for x in index["runs"]] == ["ok", "ok"]
    for f in sides.list_runs(out):
        assert _cycles(f)["cycle"] == 12  # the shim ran in every run's scheduler subprocess
