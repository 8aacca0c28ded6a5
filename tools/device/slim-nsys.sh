#!/bin/bash
# The Nsight Systems 2024.2.3 *target* package, slimmed to fit the device tool's 64 MiB carry
# beside the repository (~43 MiB tracked): .nsysslim/nsys-slim.tar.xz, ~23 MiB. Removed: CUPTI
# builds for CUDA 10/11 (the H200 image runs CUDA 13: libcupti.so.12.5 stays), CollectX, the
# bundled sqlite3, Vulkan layers, the MPI/UCX/SHMEM, cuDNN/cuBLAS and Python injection libraries,
# the report/rule scripts. `-t cuda,nvtx --cuda-graph-trace=node` captures worked with it on the
# lent H200 (2026-12-01, samples/runs). Run in the repo root; needs .nsys/ from
# `NSYS_TARGET_ONLY=1 ../shared/tools/install-nsys.sh .nsys` (see shared/docs/device-capture.md).
set -euo pipefail
work=$(mktemp -d)
dpkg -x .nsys/*.deb "$work"
t="$work/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64"
rm -rf "$t"/libcupti.so.10.* "$t"/libcupti.so.11.* "$t"/CollectX "$t"/sqlite3 "$t"/vulkan-layers \
  "$t"/libToolsInjectionMPICH64.so "$t"/libToolsInjectionOpenMPI64.so \
  "$t"/libToolsInjectionOpenSHMEM64.so "$t"/libToolsInjectionUCP64.so \
  "$t"/libToolsInjectionCuDNN64_*.so "$t"/libToolsInjectionCuBLAS64_*.so \
  "$t"/libToolsInjectionPython*.so "$t"/python "$t"/PythonFunctionsTrace "$t"/GpuMetrics \
  "$t"/reports "$t"/rules
mkdir -p .nsysslim
tar cf - -C "$work" usr | xz -T2 -6 > .nsysslim/nsys-slim.tar.xz
grep -q '^/.nsysslim/$' .git/info/exclude 2>/dev/null || echo /.nsysslim/ >> .git/info/exclude
rm -rf "$work"
ls -la .nsysslim/nsys-slim.tar.xz
