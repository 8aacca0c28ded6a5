"""Preset `sglang-eagle3`: an SGLang server with EAGLE-3 speculative decoding and a bench client.

Stage: capture. `build(args)` (run by tracediff) turns the preset options into the profiled command;
`driver()` (run under nsys, as `python THIS_FILE --driver ...`) is that command: it starts
`python -m sglang.launch_server`, waits for /health, optionally warms up, asks the server for a
cudaProfilerApi window (`/start_profile` with activities ["CUDA_PROFILER"]), runs the benchmark
client (`sglang.bench_one_batch_server` or `sglang.bench_serving`) and shuts the server down.

The worktree's `python/` folder goes first on PYTHONPATH, so the commit under test is the SGLang
that runs; capture/shim adds `cycle` > `draft` / `verify` / `draft_extend` NVTX ranges inside the
scheduler processes. The driver half uses only the standard library (it runs in SGLang's Python).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

SGLANG_VERSION = "0.5.23"
"""The SGLang release the shim's targets were checked against (tests/unit/capture/test_sglang_shim.py)."""
SGLANG_LEGACY_VERSION = "0.5.5"
"""A release that still has EAGLEWorker (v1); its targets are checked against this one."""

# (module, class, method) -> parameter names, as in that release's source. The shim wraps with
# (self, *args, **kwargs) and reads the batch from the first argument after self.
EXPECTED_SIGNATURES: dict[str, dict[tuple[str, str, str], list[str]]] = {
    SGLANG_VERSION: {
        ("sglang.srt.speculative.eagle_worker_v2", "EAGLEWorkerV2", "forward_batch_generation"): [
            "self",
            "batch",
            "on_publish",
            "grammar_barrier",
            "pp_proxy_tensors",
        ],
        ("sglang.srt.speculative.eagle_worker_v2", "EAGLEWorkerV2", "verify"): [
            "self",
            "batch",
            "pp_proxy_tensors",
            "grammar_barrier",
        ],
        ("sglang.srt.speculative.eagle_worker_v2", "EagleDraftWorker", "draft"): [
            "self",
            "batch",
            "*",
            "with_topology",
        ],
        (
            "sglang.srt.speculative.eagle_worker_v2",
            "EagleDraftWorker",
            "_draft_extend_for_decode",
        ): ["self", "batch", "batch_result", "*", "kv_loc_plan"],
    },
    SGLANG_LEGACY_VERSION: {
        ("sglang.srt.speculative.eagle_worker", "EAGLEWorker", "forward_batch_generation"): [
            "self",
            "batch",
        ],
        ("sglang.srt.speculative.eagle_worker", "EAGLEWorker", "draft"): ["self", "batch"],
        ("sglang.srt.speculative.eagle_worker", "EAGLEWorker", "verify"): [
            "self",
            "batch",
            "spec_info",
        ],
        (
            "sglang.srt.speculative.eagle_worker",
            "EAGLEWorker",
            "forward_draft_extend_after_decode",
        ): ["self", "batch"],
    },
}
NVTX_SHIM = "sglang-eagle"
BENCH_MODULES = {"one-batch": "sglang.bench_one_batch_server", "serving": "sglang.bench_serving"}


def add_arguments(g: argparse._ArgumentGroup) -> None:
    """Preset options, added to `tracediff capture` (used with --preset sglang-eagle3)."""
    g.add_argument("--model", help="target model path (or hub id the GPU host can load)")
    g.add_argument("--draft-model", help="EAGLE-3 draft model path")
    g.add_argument("--tp", type=int, default=1, help="tensor-parallel size (default 1)")
    g.add_argument("--spec-steps", type=int, default=3, help="--speculative-num-steps (default 3)")
    g.add_argument("--spec-topk", type=int, default=1, help="--speculative-eagle-topk (default 1)")
    g.add_argument(
        "--spec-draft-tokens",
        type=int,
        default=4,
        help="--speculative-num-draft-tokens (default 4)",
    )
    g.add_argument(
        "--bench",
        choices=sorted(BENCH_MODULES),
        default="one-batch",
        help="benchmark client (default one-batch: bench_one_batch_server)",
    )
    g.add_argument("--batch-size", type=int, default=8)
    g.add_argument("--input-len", type=int, default=256)
    g.add_argument("--output-len", type=int, default=32)
    g.add_argument(
        "--profile-steps",
        type=int,
        default=20,
        help="forward steps inside the cudaProfilerApi window (default 20)",
    )
    g.add_argument(
        "--warmup", type=int, default=1, help="benchmark runs before the window (default 1)"
    )
    g.add_argument("--port", type=int, default=30000)
    g.add_argument(
        "--python", dest="preset_python", help="SGLang's Python (default: python3 on PATH)"
    )
    g.add_argument(
        "--server-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra launch_server argument (repeatable), e.g. --server-arg=--dtype=float16",
    )
    g.add_argument(
        "--bench-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra benchmark argument (repeatable)",
    )
    g.add_argument("--ready-timeout", type=float, default=900.0, help="seconds to wait for /health")


def server_args(a: argparse.Namespace) -> list[str]:
    if not a.model or not a.draft_model:
        from tracediff.base.errors import UsageError

        raise UsageError(
            "--preset sglang-eagle3 needs --model and --draft-model",
            "e.g. --model meta-llama/Llama-3.1-8B-Instruct --draft-model PATH",
        )
    return [
        "--model-path",
        a.model,
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        a.draft_model,
        "--speculative-num-steps",
        str(a.spec_steps),
        "--speculative-eagle-topk",
        str(a.spec_topk),
        "--speculative-num-draft-tokens",
        str(a.spec_draft_tokens),
        "--tp-size",
        str(a.tp),
        *a.server_arg,
    ]


def bench_args(a: argparse.Namespace, base_url: str) -> list[str]:
    if a.bench == "one-batch":
        return [
            "--model-path",
            a.model,
            "--base-url",
            base_url,
            "--batch-size",
            str(a.batch_size),
            "--input-len",
            str(a.input_len),
            "--output-len",
            str(a.output_len),
            *a.bench_arg,
        ]
    return [
        "--backend",
        "sglang",
        "--base-url",
        base_url,
        "--model",
        a.model,
        "--dataset-name",
        "random",
        "--num-prompts",
        str(a.batch_size * 4),
        "--max-concurrency",
        str(a.batch_size),
        "--random-input-len",
        str(a.input_len),
        "--random-output-len",
        str(a.output_len),
        *a.bench_arg,
    ]


def build(a: argparse.Namespace) -> dict[str, Any]:
    """The profiled command and its capture settings, for capture.runner.CaptureSpec."""
    python = a.preset_python or "python3"
    url = f"http://127.0.0.1:{a.port}"
    cmd = [
        python,
        os.path.abspath(__file__),
        "--driver",
        "--python",
        python,
        "--port",
        str(a.port),
        "--bench-module",
        BENCH_MODULES[a.bench],
        "--ready-timeout",
        str(a.ready_timeout),
        "--warmup",
        str(a.warmup),
        "--profile-steps",
        str(a.profile_steps),
        "--server-args",
        json.dumps(server_args(a)),
        "--bench-args",
        json.dumps(bench_args(a, url)),
    ]
    return {
        "command": cmd,
        "pythonpath": ["python"],  # SGLang's package lives under python/ in its repo
        "nvtx_shim": NVTX_SHIM,
        "python": python,
        "capture_range": ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"],
    }


# ---- driver: runs under nsys, in SGLang's Python; standard library only ----


def _say(msg: str) -> None:
    print(f"sglang-eagle3: {msg}", file=sys.stderr, flush=True)


def _http(url: str, body: dict[str, Any] | None = None, timeout: float = 10.0) -> int:
    data = None if body is None else json.dumps(body).encode()
    import urllib.error  # here, not at module level: every CLI start imports this module
    import urllib.request

    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except (urllib.error.URLError, OSError):
        return 0


def _wait_ready(server: subprocess.Popen[bytes], url: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            _say(f"the server exited with code {server.returncode} before it was ready")
            return False
        if _http(url + "/health", timeout=5) == 200:
            return True
        time.sleep(1.0)
    _say(f"the server was not ready after {timeout:.0f} s")
    return False


def _stop(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is not None:
        return
    server.send_signal(signal.SIGTERM)  # SGLang's launcher kills its scheduler tree on SIGTERM
    try:
        server.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def driver(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="sglang_eagle3.py --driver")
    p.add_argument("--driver", action="store_true")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--bench-module", required=True)
    p.add_argument("--ready-timeout", type=float, default=900.0)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--profile-steps", type=int, default=20)
    p.add_argument("--server-args", required=True)
    p.add_argument("--bench-args", required=True)
    a = p.parse_args(argv)
    url = f"http://127.0.0.1:{a.port}"
    bench = [a.python, "-m", a.bench_module, *json.loads(a.bench_args)]
    # own session, so a stuck server tree can be killed as a whole
    server = subprocess.Popen(
        [a.python, "-m", "sglang.launch_server", *json.loads(a.server_args), "--port", str(a.port)],
        start_new_session=True,
    )
    try:
        if not _wait_ready(server, url, a.ready_timeout):
            return 1
        for i in range(a.warmup):
            _say(f"warm-up run {i + 1}/{a.warmup}")
            subprocess.run(bench, check=False)
        status = _http(
            url + "/start_profile",
            {"num_steps": a.profile_steps, "activities": ["CUDA_PROFILER"]},
            timeout=60,
        )
        if status != 200:
            _say(f"/start_profile answered {status}: the capture range may stay closed")
        _say("measured run")
        return subprocess.run(bench, check=False).returncode
    finally:
        _stop(server)


if __name__ == "__main__":
    if "--driver" in sys.argv[1:]:
        sys.exit(driver(sys.argv[1:]))
    sys.exit("sglang_eagle3.py: run through `tracediff capture --preset sglang-eagle3`")
