"""A small speculative-decoding loop on one GPU, to try `tracediff capture` → `compare` end to end.

Runs inside the profiled process: standard library + torch only. Adapted from the workload of the
shared H200 traces (../shared/traces/h200-specloop/specloop.py).

Each cycle (NVTX `cycle`): the draft model proposes K tokens one at a time (`draft`), the target
verifies K+1 tokens in one forward with a tensor-parallel style all-reduce after attention and MLP
(`verify`), then the draft model consumes the accepted tokens (`draft_extend`). The measured
cycles sit inside cudaProfilerStart/Stop, so capture with `--capture-range cudaProfilerApi`:

    tracediff capture --commit HEAD -o runs/good --capture-range cudaProfilerApi -- \\
        python capture/workload/specloop.py --variant good
    tracediff capture --commit HEAD -o runs/bad --capture-range cudaProfilerApi -- \\
        python capture/workload/specloop.py --variant slow-verify
    tracediff compare runs/good/run.arrow runs/bad/run.arrow

Run sets (4 runs of each variant, interleaved good bad slow-verify slow-verify bad good ...):

    tracediff capture --commit HEAD --repeat 4 --variants good,bad,slow-verify -o runs/sets \\
        --capture-range cudaProfilerApi -- python capture/workload/specloop.py --variant {variant}

Variants (each changes one phase, so a diff has a known right answer):
    good         baseline
    bad          verify all-reduce out of place: an extra buffer and a device copy per all-reduce
                 (under --graph the copies are graph nodes; world size 1 launches no NCCL kernel)
    slow-verify  verify runs its MLP twice: on the H200, verify kernels +1.1 ms/cycle (16 layers)
    extra-sync   a torch.cuda.synchronize() after every draft step: host-side only; draft is
                 launch-bound here, so it costs little: a check that compare does not over-blame it
    slow-extend  draft_extend recomputes the whole context instead of the last K+1 tokens

Measured on the lent H200 (torch 2.11, CUDA 13): a cycle is about 4-7 ms, verify (a CUDA graph)
is GPU-bound, draft and draft_extend are launch-bound (Python), so their host-bound idle gaps swing
by a millisecond between processes: compare kernel rows, and repeat captures before blaming code.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any

VARIANTS = ("good", "bad", "slow-verify", "extra-sync", "slow-extend")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variant", choices=VARIANTS, default="good")
    p.add_argument(
        "--cycles", type=int, default=12, help="measured cycles (inside the profiler range)"
    )
    p.add_argument(
        "--warmup", type=int, default=20, help="cycles before the range (clocks ramp up)"
    )
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--k", type=int, default=3, help="draft tokens per cycle")
    p.add_argument(
        "--graph",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="replay verify as a CUDA graph (default; without it verify is launch-bound)",
    )
    p.add_argument("--no-dist", action="store_true", help="skip the world-size-1 NCCL group")
    return p.parse_args(argv)


def _process_group(dev: Any) -> Any:
    """A world-size-1 NCCL process group (torch.distributed), or None where it cannot be made:
    a single-GPU box without NCCL still runs the loop."""
    try:
        import torch.distributed as tdist

        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29511")
        tdist.init_process_group("nccl", rank=0, world_size=1, device_id=dev)
        return tdist
    except Exception as e:
        print(f"specloop: no NCCL process group ({e})", file=sys.stderr)
        return None


def _timed(torch: Any, cycle: Callable[[], Any], warmup: int, cycles: int) -> float:
    """Seconds per cycle of `cycles` cycles run inside cudaProfilerStart/Stop (what a capture
    with --capture-range cudaProfilerApi records), after `warmup` cycles outside it."""
    for _ in range(warmup):
        cycle()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    t0 = time.perf_counter()
    for _ in range(cycles):
        cycle()
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / max(cycles, 1)
    torch.cuda.cudart().cudaProfilerStop()
    return dt


def _graph(torch: Any, verify: Callable[[], Any]) -> tuple[Any, Any]:
    """`verify` captured as a CUDA graph, after three warm-up calls on a side stream (as torch
    asks): the graph and the output tensor its replays write."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            verify()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = verify()
    return graph, out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import torch
        import torch.nn.functional as F  # noqa: N812
    except ImportError:
        print("specloop: torch is not installed in this Python", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("specloop: no CUDA device (this workload needs one GPU)", file=sys.stderr)
        return 1
    nvtx = torch.cuda.nvtx
    dev = torch.device("cuda:0")
    torch.manual_seed(0)
    H, L, K = args.hidden, args.layers, args.k  # noqa: N806
    v = args.variant

    dist = None if args.no_dist else _process_group(dev)

    def allreduce(x: torch.Tensor, outplace: bool = False) -> torch.Tensor:
        if dist is None:
            return x
        if outplace:
            y = torch.empty_like(x)
            y.copy_(x)
            dist.all_reduce(y)
            return y
        dist.all_reduce(x)
        return x

    class Layer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = torch.nn.Linear(H, 3 * H, bias=False)
            self.o = torch.nn.Linear(H, H, bias=False)
            self.up = torch.nn.Linear(H, 4 * H, bias=False)
            self.down = torch.nn.Linear(4 * H, H, bias=False)

        def forward(
            self, x: torch.Tensor, outplace: bool = False, mlp_twice: bool = False
        ) -> torch.Tensor:
            b, t, _ = x.shape
            q, k, vv = self.qkv(F.layer_norm(x, (H,))).view(b, t, 3, 32, H // 32).unbind(2)
            q, k, vv = (z.transpose(1, 2) for z in (q, k, vv))
            a = F.scaled_dot_product_attention(q, k, vv, is_causal=True)
            x = x + allreduce(self.o(a.transpose(1, 2).reshape(b, t, H)), outplace)
            h = self.down(F.gelu(self.up(F.layer_norm(x, (H,)))))
            if mlp_twice:  # the regression: same result, twice the MLP work
                h = self.down(F.gelu(self.up(F.layer_norm(x, (H,)))))
            return x + allreduce(h, outplace)

    target = torch.nn.ModuleList([Layer() for _ in range(L)]).to(dev, torch.bfloat16)
    draft = torch.nn.ModuleList([Layer()]).to(dev, torch.bfloat16)
    head = torch.nn.Linear(H, 32000, bias=False).to(dev, torch.bfloat16)
    emb = torch.nn.Embedding(32000, H).to(dev, torch.bfloat16)

    def run(mods: torch.nn.ModuleList, tok: torch.Tensor, **kw: bool) -> torch.Tensor:
        x = emb(tok)
        for m in mods:
            x = m(x, **kw)
        return head(x[:, -1:]).argmax(-1)

    verify_kw = {"outplace": v == "bad", "mlp_twice": v == "slow-verify"}
    ctx = torch.randint(0, 32000, (1, 64), device=dev)
    graph = None
    static_in = ctx[:, -(K + 1) :].clone()
    static_out = None

    def cycle() -> torch.Tensor:
        nvtx.range_push("cycle")
        nvtx.range_push("draft")
        toks = ctx
        for _ in range(K):
            toks = torch.cat([toks, run(draft, toks[:, -8:])], 1)
            if v == "extra-sync":
                torch.cuda.synchronize()
        nvtx.range_pop()
        nvtx.range_push("verify")
        if graph is not None:
            static_in.copy_(toks[:, -(K + 1) :])
            graph.replay()
            out = static_out
        else:
            out = run(target, toks[:, -(K + 1) :], **verify_kw)
        torch.cuda.synchronize()  # acceptance needs the tokens on the host
        nvtx.range_pop()
        nvtx.range_push("draft_extend")
        run(draft, toks if v == "slow-extend" else toks[:, -(K + 1) :])
        nvtx.range_pop()
        nvtx.range_pop()
        return out

    with torch.no_grad():
        if args.graph:
            graph, static_out = _graph(torch, lambda: run(target, static_in, **verify_kw))
        dt = _timed(torch, cycle, args.warmup, args.cycles)
    print(f"specloop: variant={v} ms_per_cycle={dt * 1e3:.3f} dist={dist is not None}")
    if dist is not None:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
