#!/bin/bash
# The Nsight Systems 2024.2.3 *target* package, slimmed to fit the device tool's 64 MiB carry
# beside the repository (45-49 MiB tracked on 2026-12-01): .nsysslim/nsys-slim.tar.xz, ~15 MiB
# (108 MiB unpacked; the first slim, 23 MiB, no longer fitted beside the tree). Removed: CUPTI
# builds for CUDA 10/11 (the H200 image runs CUDA 13: libcupti.so.12.5 stays), CollectX, the
# bundled sqlite3, Vulkan layers, the MPI/UCX/SHMEM, cuDNN/cuBLAS injection libraries, the Python
# backtrace and GIL-tracing injections (they need CPU sampling, which hangs on the H200), the
# report/rule scripts and nsys_recipe, GPU metrics (GpuMetrics/ and libnvperf_grfx_host.so, 28 MB:
# only --gpu-metrics-* loads it), the GPU context-switch tracer nvgpucs, the NVTX headers and the
# package docs. Kept for `--python-functions-trace`: libToolsInjectionPythonNvtxAnnotations64.so
# and PythonFunctionsTrace/. `-t cuda,nvtx --cuda-graph-trace=node --capture-range=cudaProfilerApi`
# captures worked with this slim on the lent H200 (2026-12-01, tests/data/h200-suspects).
# Run in the repo root; needs .nsys/ from `NSYS_TARGET_ONLY=1 ../shared/tools/install-nsys.sh .nsys`
# (see shared/docs/device-capture.md). XZ_OPT overrides the compression (default -9e: ~1.5 min).
set -euo pipefail
work=$(mktemp -d)
dpkg -x .nsys/*.deb "$work"
t="$work/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64"
rm -rf "$t"/libcupti.so.10.* "$t"/libcupti.so.11.* "$t"/CollectX "$t"/sqlite3 "$t"/vulkan-layers \
  "$t"/libToolsInjectionMPICH64.so "$t"/libToolsInjectionOpenMPI64.so \
  "$t"/libToolsInjectionOpenSHMEM64.so "$t"/libToolsInjectionUCP64.so \
  "$t"/libToolsInjectionCuDNN64_*.so "$t"/libToolsInjectionCuBLAS64_*.so \
  "$t"/libToolsInjectionPythonBacktrace64.so "$t"/libToolsInjectionPythonGilTracing64.so \
  "$t"/python "$t"/GpuMetrics "$t"/libnvperf_grfx_host.so "$t"/nvgpucs "$t"/nvtx \
  "$t"/reports "$t"/rules "$work"/usr/share
mkdir -p .nsysslim
tar cf - -C "$work" usr | xz -T2 ${XZ_OPT:--9e} > .nsysslim/nsys-slim.tar.xz
ex=$(git rev-parse --git-path info/exclude)  # a worktree's .git is a file
grep -q '^/.nsysslim/$' "$ex" 2>/dev/null || echo /.nsysslim/ >> "$ex"
rm -rf "$work"
ls -la .nsysslim/nsys-slim.tar.xz
