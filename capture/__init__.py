"""What runs on the GPU host around the workload: `tracediff capture`.

- `worktree.py`  the commit under test, checked out in a temporary git worktree
- `manifest.py`  the environment manifest (GPUs, clocks, driver, NCCL/torch, nsys, env, git)
- `runner.py`    the nsys invocation, fault handling, import/parse into OUTDIR/run.arrow
- `outdir.py`    OUTDIR: checked, parents created, published by one exclusive rename
- `runsets.py`   `--repeat N`: commits and variants captured N times, interleaved, resumable
- `presets/`     ready-made workloads (sglang-eagle3)
- `shim/`        sitecustomize-style NVTX injection loaded inside the profiled processes
- `workload/`    a small torch speculative-decoding loop to try capture → compare on one GPU

Only `shim/` and `workload/` run inside the profiled process; they use the standard library plus
torch/nvtx, never tracediff's own dependencies.
"""
