"""A synthetic Kineto trace recorded `with_stack=True`: N kernels, each launched from a Python stack.

    bench/gen_kineto_stacks.py OUT.json [--kernels 1000000]

Deterministic (no randomness: the same N gives the same bytes). A benchmark input for
bench/kineto_stacks.py and, small, a test input (tests/unit/parse/test_stack_resolution.py);
never a fixture on disk. The shape follows the real TraceLens SGLang trace's: one launching
thread under a root call, per step `serve.py(20): step`, per layer `model.py(52): forward`, per
op a helper call that launches nothing, then the op's function, its `<built-in method ...>` (an
object address in the name, different per op), the `aten::` operator and 1 or 2
`cudaLaunchKernel`s; a second thread of the same process runs Python calls only (a detokenizer
polling), which stack resolution must skip. Kernels run on one stream, 40 µs after their launch.
Per kernel: 1 kernel, 1 runtime call, 0.75 operators, 2.4 Python calls (~1 KB of JSON).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

OPS = 8  # per layer; every third op launches two kernels
LAYERS = 4
PID, MAIN, DETOK, STREAM = 7, 7, 9, 7
_PER_LAYER = OPS + (OPS + 2) // 3  # kernels launched per layer


def _ts(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


class _Out:
    def __init__(self, f: TextIO) -> None:
        self.f, self.buf, self.first, self.py_id = f, [], True, 0

    def ev(self, cat: str, name: str, tid: int, t0: int, t1: int, args: str) -> None:
        pre = "" if self.first else ","
        self.first = False
        self.buf.append(
            f'{pre}{{"ph":"X","cat":"{cat}","name":"{name}","pid":{PID if cat != "kernel" else 0},'
            f'"tid":{tid},"ts":{_ts(t0)},"dur":{_ts(t1 - t0)},"args":{{{args}}}}}'
        )
        if len(self.buf) >= 4096:
            self.flush()

    def py(self, name: str, tid: int, t0: int, t1: int, parent: int) -> int:
        self.py_id += 1
        self.ev("python_function", name, tid, t0, t1,
                f'"Python parent id":{parent},"Python id":{self.py_id},"Ev Idx":{self.py_id}')  # fmt: skip
        return self.py_id

    def flush(self) -> None:
        self.f.write("".join(self.buf))
        self.buf.clear()


def write(path: Path, kernels: int) -> int:
    """Write the trace; returns the number of kernels (whole layers: at least `kernels`)."""
    layers = max(1, -(-kernels // _PER_LAYER))
    steps = -(-layers // LAYERS)
    t = 1_000_000_000  # ns from the trace's start
    corr, gpu_free, n_kernels = 0, 0, 0
    with open(path, "w") as f:
        f.write('{"schemaVersion":1,"with_stack":1,"baseTimeNanoseconds":1775078550000000000,'
                '"deviceProperties":[{"id":0,"name":"Synthetic GPU"}],"traceEvents":[')  # fmt: skip
        o = _Out(f)
        root_t0, body = t, []
        t += 5_000
        layer = 0
        for step in range(steps):
            s0 = t
            t += 2_000
            for _ in range(min(LAYERS, layers - layer)):
                l0, at = t, len(body)
                t += 1_000
                for k in range(OPS):
                    o.py("utils.py(5): check_shape", MAIN, t, t + 800, 0)
                    t += 1_500
                    f0 = t
                    b0 = t + 700
                    a0 = b0 + 600
                    t = a0 + 400
                    launches = []
                    for _ in range(2 if k % 3 == 0 else 1):
                        launches.append((t, t + 3_000))
                        t += 3_500
                    a1 = t + 300
                    b1 = a1 + 500
                    f1 = b1 + 400
                    body.append((f0, f1, b0, b1, a0, a1, k, launches))
                    t = f1 + 600
                l1 = t
                t += 800
                layer += 1
                body.insert(at, (l0, l1, 0, 0, 0, 0, -1, []))  # before its ops: their parent
            s1 = t
            t += 3_000
            # the Python calls in the order Kineto writes them (each at its return), with ids
            step_id = o.py("serve.py(20): step", MAIN, s0, s1, 1)
            lid = 0
            for f0, f1, b0, b1, a0, a1, k, launches in body:
                if k < 0:
                    lid = o.py("model.py(52): forward", MAIN, f0, f1, step_id)
                    continue
                fid = o.py(f"layers.py({10 + 10 * k}): op_{k}", MAIN, f0, f1, lid)
                o.py(f"<built-in method op_{k} of PyCapsule object at 0x7f3a{k:04x}{step % 256:02x}>",
                     MAIN, b0, b1, fid)  # fmt: skip
                o.ev("cpu_op", f"aten::op_{k}", MAIN, a0, a1, f'"External id":{corr}')
                for l0_, l1_ in launches:
                    corr += 1
                    o.ev("cuda_runtime", "cudaLaunchKernel", MAIN, l0_, l1_,
                         f'"External id":{corr},"correlation":{corr}')  # fmt: skip
                    g0 = max(l0_ + 40_000, gpu_free + 1_000)
                    gpu_free = g0 + 3_000
                    o.ev("kernel", f"op_{k}_kernel", STREAM, g0, gpu_free,
                         f'"device":0,"stream":{STREAM},"correlation":{corr},'
                         '"grid":[128,1,1],"block":[256,1,1],"registers per thread":32')  # fmt: skip
                    n_kernels += 1
            body.clear()
            for i in range(3):  # the detokenizer thread: Python calls, no launches
                p0 = s0 + 1_000 + i * 20_000
                o.py("detokenizer.py(8): poll", DETOK, p0, p0 + 9_000, 0)
        o.py("serve.py(1): main", MAIN, root_t0, t, 0)
        o.flush()
        f.write("]}")
    return n_kernels


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--kernels", type=int, default=1_000_000)
    a = ap.parse_args()
    n = write(a.out, a.kernels)
    print(f"{a.out}: {n} kernels, {a.out.stat().st_size / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
