"""Build the small git repo of issue 19's device case (tests/data/h200-suspects): `minispec`.

Usage: python3 tools/device/suspects_repo.py DEST   (DEST must not exist; prints one line per
commit: hash, role, subject)

A four-layer bf16 decode step (hidden 4096, 4 tokens) at five commits, with fixed author, committer
and dates, so the hashes are the same wherever it is built (standard library and git only: it runs
on the GPU host too). The stacks of the MLP kernels are bench.step > model.forward > model.block >
layers.mlp; attention's are ... > model.block > layers.attend; layer norm's ... > layers.norm.

    c0 base      the loop
    c1 sibling   layers.norm (same file as mlp, on the same stacks): eps spelled out, same kernels
    c2 caller    model.block (the caller of mlp): residuals through a local, same kernels
    c3 culprit   layers.mlp: fp32 up-projection (upcast activations and weight): slower kernels
    c4 unused    model.forward: the prefix-cache branch, which bench.py never takes

The culprit is neither the first nor the last commit. bench.py (`--mode eager|graph`, `--kineto
FILE` for a PyTorch-profiler trace with `with_stack=True`) marks each step with an NVTX and a
profiler range `cycle`; in graph mode the CUDA graph is captured inside the measured window (after
cudaProfilerStart, inside the profiler), so capture-time launches are recorded.
"""

from __future__ import annotations

import sys
from pathlib import Path

from fixedrepo import commit_edits, main

BENCH = '''\
"""minispec bench: one decode step of a 4-layer bf16 model per cycle (NVTX/profiler `cycle`).

    python bench.py --mode eager|graph [--cycles N] [--kineto trace.json]

The measured cycles sit inside cudaProfilerStart/Stop (nsys --capture-range=cudaProfilerApi) or,
with --kineto, inside a torch.profiler session with with_stack=True whose Chrome trace is written
to the file. In graph mode the step is captured as a CUDA graph inside that window, then replayed.
"""

import argparse
import contextlib
import time

import torch

from minispec import model


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("eager", "graph"), default="eager")
    p.add_argument("--cycles", type=int, default=12)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--tokens", type=int, default=4)
    p.add_argument("--kineto", help="write a PyTorch-profiler trace (with_stack=True) here")
    a = p.parse_args()
    dev = torch.device("cuda:0")
    torch.manual_seed(0)
    params = model.init(a.layers, a.hidden, dev)
    x = torch.randn(1, a.tokens, a.hidden, device=dev, dtype=torch.bfloat16)

    def step():
        torch.cuda.nvtx.range_push("cycle")
        with torch.profiler.record_function("cycle"):
            y = model.forward(x, params, heads=32)
        torch.cuda.nvtx.range_pop()
        return y

    with torch.no_grad():
        for _ in range(a.warmup):
            step()
        torch.cuda.synchronize()
        prof = contextlib.nullcontext()
        if a.kineto:
            acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
            prof = torch.profiler.profile(activities=acts, with_stack=True)
        with prof:
            torch.cuda.cudart().cudaProfilerStart()
            run = step
            if a.mode == "graph":
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    model.forward(x, params, heads=32)
                torch.cuda.synchronize()

                def run():
                    torch.cuda.nvtx.range_push("cycle")
                    with torch.profiler.record_function("cycle"):
                        g.replay()
                    torch.cuda.nvtx.range_pop()

            t0 = time.perf_counter()
            for _ in range(a.cycles):
                run()
                torch.cuda.synchronize()
            dt = (time.perf_counter() - t0) / a.cycles
            torch.cuda.cudart().cudaProfilerStop()
        if a.kineto:
            prof.export_chrome_trace(a.kineto)
    print(f"minispec: mode={a.mode} ms_per_cycle={dt * 1e3:.3f}")


if __name__ == "__main__":
    main()
'''

LAYERS = '''\
"""Layer functions of the minispec model (weights in a dict per layer)."""

import torch.nn.functional as F


def norm(x):
    return F.layer_norm(x, x.shape[-1:])


def attend(x, p, heads):
    b, t, h = x.shape
    q, k, v = (x @ p["qkv"]).view(b, t, 3, heads, h // heads).unbind(2)
    q, k, v = (z.transpose(1, 2) for z in (q, k, v))
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return a.transpose(1, 2).reshape(b, t, h) @ p["o"]


def mlp(x, p):
    return F.gelu(x @ p["up"]) @ p["down"]
'''

MODEL = '''\
"""The minispec model: pre-norm blocks of attention and MLP."""

import torch

from minispec import layers


def init(n_layers, hidden, device):
    def w(i, o):
        return torch.randn(i, o, device=device, dtype=torch.bfloat16) * hidden**-0.5

    return [
        {"qkv": w(hidden, 3 * hidden), "o": w(hidden, hidden),
         "up": w(hidden, 4 * hidden), "down": w(4 * hidden, hidden)}
        for _ in range(n_layers)
    ]


def block(x, p, heads):
    x = x + layers.attend(layers.norm(x), p, heads)
    return x + layers.mlp(layers.norm(x), p)


def forward(x, params, heads, cache=None):
    if cache is not None:  # prefix cache (serving only; bench.py passes none)
        x = torch.cat([cache, x], 1)
    for p in params:
        x = block(x, p, heads)
    return x
'''

EDITS = [
    ("base", "minispec: a four-layer decode step and its bench", {}),
    (
        "sibling",
        "layers.norm: spell out the layer-norm eps",
        {
            "minispec/layers.py": (
                "F.layer_norm(x, x.shape[-1:])",
                "F.layer_norm(x, x.shape[-1:], eps=1e-5)",
            )
        },
    ),
    (
        "caller",
        "model.block: name the residual branches",
        {
            "minispec/model.py": (
                "    x = x + layers.attend(layers.norm(x), p, heads)\n"
                "    return x + layers.mlp(layers.norm(x), p)\n",
                "    h = layers.attend(layers.norm(x), p, heads)\n"
                "    x = x + h\n"
                "    h = layers.mlp(layers.norm(x), p)\n"
                "    return x + h\n",
            )
        },
    ),
    (
        "culprit",
        "layers.mlp: fp32 up-projection for accuracy",
        {
            "minispec/layers.py": (
                '    return F.gelu(x @ p["up"]) @ p["down"]\n',
                '    h = F.gelu(x.float() @ p["up"].float())  # upcast: fp32 GEMM and GELU\n'
                '    return h.to(x.dtype) @ p["down"]\n',
            )
        },
    ),
    (
        "unused",
        "model.forward: keep the last 256 tokens of the prefix cache",
        {
            "minispec/model.py": (
                "        x = torch.cat([cache, x], 1)\n",
                "        x = torch.cat([cache[:, -256:], x], 1)\n",
            )
        },
    ),
]


def build(dest: Path) -> list[tuple[str, str, str]]:
    dest.mkdir(parents=True)
    (dest / "minispec").mkdir()
    files = {
        "bench.py": BENCH,
        "minispec/__init__.py": "",
        "minispec/layers.py": LAYERS,
        "minispec/model.py": MODEL,
    }
    return commit_edits(dest, files, EDITS, hour=9, who="minispec")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], "suspects_repo.py", build))
