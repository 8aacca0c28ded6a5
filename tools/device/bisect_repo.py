"""Build the small git repo of issue 18's device case (tests/data/h200-bisect): `specbisect`.

Usage: python3 tools/device/bisect_repo.py DEST   (DEST must not exist; prints one line per
commit: hash, role, subject)

specloop.py (a speculative-decoding loop as capture/workload/specloop.py: NVTX `cycle` > `draft`,
`verify`, `draft_extend`; verify replayed as a CUDA graph; a world-size-1 NCCL group, so
`all_reduce` launches no kernel) at seven commits with fixed author, committer and dates: the
hashes are the same wherever it is built (standard library and git only: it runs on the GPU host).

    c1 good      the loop
    c2 herring   specloop.py: argparse help and a comment (the file the culprit touches, no change)
    c3 docs      README
    c4 culprit   all_reduce out of place, as in the motivating case: a new buffer and a device
                 copy per all-reduce (2 per layer in verify: Memcpy DtoD graph nodes)
    c5 seed      specloop.py: --seed (same default)
    c6 phases    specloop.py: draft_extend through a helper (same kernels)
    c7 docs      README: how to bisect it
"""

from __future__ import annotations

import sys
from pathlib import Path

from fixedrepo import commit_edits, main

SPECLOOP = '''\
"""A speculative-decoding loop on one GPU (NVTX cycle > draft / verify / draft_extend)."""

import argparse
import os
import time

import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--cycles", type=int, default=12)
p.add_argument("--warmup", type=int, default=10)
p.add_argument("--hidden", type=int, default=4096)
p.add_argument("--layers", type=int, default=8)
p.add_argument("--k", type=int, default=3)
a = p.parse_args()
H, L, K = a.hidden, a.layers, a.k
dev = torch.device("cuda:0")
torch.manual_seed(0)
nvtx = torch.cuda.nvtx

import torch.distributed as dist

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29511")
dist.init_process_group("nccl", rank=0, world_size=1, device_id=dev)


def allreduce(x):
    dist.all_reduce(x)
    return x


def lin(i, o):
    return torch.nn.Linear(i, o, bias=False, device=dev, dtype=torch.bfloat16)


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.o = lin(H, 3 * H), lin(H, H)
        self.up, self.down = lin(H, 4 * H), lin(4 * H, H)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(F.layer_norm(x, (H,))).view(b, t, 3, 32, H // 32).unbind(2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + allreduce(self.o(att.transpose(1, 2).reshape(b, t, H)))
        return x + allreduce(self.down(F.gelu(self.up(F.layer_norm(x, (H,))))))


target = torch.nn.ModuleList([Layer() for _ in range(L)])
draft = torch.nn.ModuleList([Layer()])
head = lin(H, 32000)
emb = torch.nn.Embedding(32000, H, device=dev, dtype=torch.bfloat16)


def run(mods, tok):
    x = emb(tok)
    for m in mods:
        x = m(x)
    return head(x[:, -1:]).argmax(-1)


ctx = torch.randint(0, 32000, (1, 64), device=dev)
static_in = ctx[:, -(K + 1):].clone()


def cycle():
    nvtx.range_push("cycle")
    nvtx.range_push("draft")
    toks = ctx
    for _ in range(K):
        toks = torch.cat([toks, run(draft, toks[:, -8:])], 1)
    nvtx.range_pop()
    nvtx.range_push("verify")
    static_in.copy_(toks[:, -(K + 1):])
    graph.replay()
    torch.cuda.synchronize()
    nvtx.range_pop()
    nvtx.range_push("draft_extend")
    run(draft, toks[:, -(K + 1):])
    nvtx.range_pop()
    nvtx.range_pop()


with torch.no_grad():
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            run(target, static_in)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = run(target, static_in)
    for _ in range(a.warmup):
        cycle()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    t0 = time.perf_counter()
    for _ in range(a.cycles):
        cycle()
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / a.cycles
    torch.cuda.cudart().cudaProfilerStop()
print(f"specloop: ms_per_cycle={dt * 1e3:.3f}")
dist.destroy_process_group()
'''

README = "specbisect: a speculative-decoding loop (python specloop.py).\n"

EDITS = [
    ("good", "specloop: a speculative-decoding loop with a world-size-1 NCCL group", {}),
    (
        "herring",
        "specloop: help text for --k, say why draft reads the last 8 tokens",
        {
            "specloop.py": (
                'p.add_argument("--k", type=int, default=3)\n',
                'p.add_argument("--k", type=int, default=3, help="draft tokens per cycle")\n',
            ),
            "specloop.py#2": (
                "        toks = torch.cat([toks, run(draft, toks[:, -8:])], 1)\n",
                "        # the draft model sees a short window: it only proposes\n"
                "        toks = torch.cat([toks, run(draft, toks[:, -8:])], 1)\n",
            ),
        },
    ),
    (
        "docs",
        "README: what the loop is",
        {"README.md": (README, README + "\nNVTX ranges: cycle > draft, verify, draft_extend.\n")},
    ),
    (
        "culprit",
        "allreduce: out of place, so the residual input stays intact",
        {
            "specloop.py": (
                "def allreduce(x):\n    dist.all_reduce(x)\n    return x\n",
                "def allreduce(x):\n    y = torch.empty_like(x)\n    y.copy_(x)\n"
                "    dist.all_reduce(y)\n    return y\n",
            )
        },
    ),
    (
        "seed",
        "specloop: --seed",
        {
            "specloop.py": (
                'p.add_argument("--k", type=int, default=3, help="draft tokens per cycle")\n',
                'p.add_argument("--k", type=int, default=3, help="draft tokens per cycle")\n'
                'p.add_argument("--seed", type=int, default=0)\n',
            ),
            "specloop.py#2": ("torch.manual_seed(0)\n", "torch.manual_seed(a.seed)\n"),
        },
    ),
    (
        "phases",
        "specloop: draft_extend through a helper",
        {
            "specloop.py": (
                '    nvtx.range_push("draft_extend")\n    run(draft, toks[:, -(K + 1):])\n'
                "    nvtx.range_pop()\n",
                "    extend(toks)\n",
            ),
            "specloop.py#2": (
                "def cycle():\n",
                "def extend(toks):\n"
                '    nvtx.range_push("draft_extend")\n    run(draft, toks[:, -(K + 1):])\n'
                "    nvtx.range_pop()\n\n\ndef cycle():\n",
            ),
        },
    ),
    (
        "docs",
        "README: how to bisect it",
        {
            "README.md": (
                "draft_extend.\n",
                "draft_extend.\nCapture with nsys --capture-range=cudaProfilerApi.\n",
            )
        },
    ),
]


def build(dest: Path) -> list[tuple[str, str, str]]:
    dest.mkdir(parents=True)
    files = {"specloop.py": SPECLOOP, "README.md": README}
    return commit_edits(dest, files, EDITS, hour=8, who="specbisect")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], "bisect_repo.py", build))
