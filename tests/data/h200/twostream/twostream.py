"""A two-stream fork/join loop on one GPU, to check cross-stream CUDA event edges end to end.

Runs inside the profiled process: standard library + torch only. Each cycle (NVTX `cycle`):

    main stream:  A (spin) -> record ev_a -> C (add) -> wait ev_b -> D (sum)
    side stream:  B0 (GEMM) -> wait ev_a -> B (mul, memory-bound) -> record ev_b

A is a one-block spin kernel (torch.cuda._sleep) that runs beside B0; only its length differs
between the variants, so its name (and the alignment) stays. In `good`, A ends before B0, so B
starts after B0 (its stream predecessor): the event edge A -> B holds but does not bind. In
`slow-a`, A spins ten times longer and ends after B0: B waits for A's event. D always waits for
B (ev_b) and ends the cycle. Replaying `good` with A taken from `slow-a` must delay B and D: only
the event edge read from the trace says so (`good`'s timeline shows B waiting on B0, not on A;
without the edge the prediction is A + C + D, short of A + B + D by about B).

Every launch of a cycle is issued before the GPU gets to it (one sync per cycle, at its end), so
what holds an op back is the GPU: the stream order and the two events. Capture with
`--capture-range cudaProfilerApi` (the measured cycles sit inside cudaProfilerStart/Stop):

    nsys profile -t cuda,nvtx --capture-range=cudaProfilerApi -o good \\
        python capture/workload/twostream.py --variant good

`--lib cupy` runs the same loop through CuPy (a RawKernel spin, cuBLAS GEMM), whose events are
recorded with cudaEventRecord: Nsight Systems 2024.2 writes a CUPTI_ACTIVITY_KIND_CUDA_EVENT row
(recording stream, event id) for cudaEventRecord but none for cudaEventRecordWithFlags, which is
what torch 2.11 calls. The torch loop gives stream waits whose records the report does not place.
"""

from __future__ import annotations

import argparse

VARIANTS = ("good", "slow-a")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variant", choices=VARIANTS, default="good")
    p.add_argument("--cycles", type=int, default=20, help="measured cycles (profiler range)")
    p.add_argument("--warmup", type=int, default=20, help="cycles before the range")
    p.add_argument("--n", type=int, default=6144, help="B0's GEMM size")
    p.add_argument("--spin", type=int, default=300_000, help="A's spin in good, GPU clock cycles")
    p.add_argument("--slow", type=int, default=10, help="A spins this many times longer in slow-a")
    p.add_argument("--b-elems", type=int, default=1 << 27, help="B's float32 elements")
    p.add_argument("--lib", choices=("torch", "cupy"), default="torch")
    return p.parse_args(argv)


def run_cupy(args: argparse.Namespace) -> int:
    import cupy as cp

    spin = cp.RawKernel(
        r"""extern "C" __global__ void spin_kernel(long long n) {
            long long t0 = clock64(); while (clock64() - t0 < n) {} }""",
        "spin_kernel",
    )
    n = args.n
    spin_n = args.spin * (args.slow if args.variant == "slow-a" else 1)
    x = cp.random.standard_normal((n, n), dtype=cp.float32).astype(cp.float16)
    w = cp.random.standard_normal((n, n), dtype=cp.float32).astype(cp.float16)
    a = cp.empty((n, n), dtype=cp.float16)
    big = cp.random.standard_normal(args.b_elems, dtype=cp.float32)
    b = cp.empty_like(big)
    c = cp.zeros(1 << 20, dtype=cp.float32)
    d = cp.empty((), dtype=cp.float32)
    main_s, side = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    ev_a, ev_b = cp.cuda.Event(disable_timing=True), cp.cuda.Event(disable_timing=True)

    def cycle() -> None:
        cp.cuda.nvtx.RangePush("cycle")
        with side:
            cp.matmul(x, w, out=a)  # B0, beside A
        with main_s:
            spin((1,), (1,), (cp.int64(spin_n),))  # A
            ev_a.record(main_s)
        side.wait_event(ev_a)
        with side:
            cp.multiply(big, 0.5, out=b)  # B
            ev_b.record(side)
        with main_s:
            cp.add(c, 1.0, out=c)  # C
        main_s.wait_event(ev_b)
        with main_s:
            cp.sum(c, out=d)  # D
        cp.cuda.Device().synchronize()
        cp.cuda.nvtx.RangePop()

    for _ in range(args.warmup):
        cycle()
    cp.cuda.profiler.start()
    for _ in range(args.cycles):
        cycle()
    cp.cuda.profiler.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.lib == "cupy":
        return run_cupy(args)
    import torch

    dev = torch.device("cuda")
    n = args.n
    spin_n = args.spin * (args.slow if args.variant == "slow-a" else 1)
    x = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    w = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    a = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
    big = torch.randn(args.b_elems, device=dev)
    b = torch.empty_like(big)
    c = torch.zeros(1 << 20, device=dev)
    d = torch.empty((), device=dev, dtype=torch.float32)
    side = torch.cuda.Stream()
    main_s = torch.cuda.current_stream()
    ev_a, ev_b = torch.cuda.Event(), torch.cuda.Event()

    def cycle() -> None:
        torch.cuda.nvtx.range_push("cycle")
        with torch.cuda.stream(side):
            torch.matmul(x, w, out=a)  # B0, beside A
        torch.cuda._sleep(spin_n)  # A
        ev_a.record(main_s)
        with torch.cuda.stream(side):
            side.wait_event(ev_a)
            torch.mul(big, 0.5, out=b)  # B (ordered after A by the event)
            ev_b.record(side)
        c.add_(1.0)  # C: independent, runs while B does
        main_s.wait_event(ev_b)
        torch.sum(c, 0, out=d)  # D (ordered after B by the event)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()

    for _ in range(args.warmup):
        cycle()
    torch.cuda.cudart().cudaProfilerStart()
    for _ in range(args.cycles):
        cycle()
    torch.cuda.cudart().cudaProfilerStop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
