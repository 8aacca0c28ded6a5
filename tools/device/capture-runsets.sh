#!/bin/bash
# On the lent H200 (device tool `run`, carry [".nsysslim"], made by tools/device/slim-nsys.sh):
# run sets of capture/workload/specloop.py good/bad/slow-verify x4, interleaved, with
# `tracediff capture --repeat` (resumable: a second call while the machine is still warm picks up
# /tmp/runs). How samples/runs was made (2026-12-01): `CAP_S=470 bash tools/device/capture-runsets.sh`
# (11 runs in 470 s), then the same again warm (the 12th). `env -i`: the run set's workload check
# compares the NCCL_/CUDA_/... variables, and a warm call's environment differed from the first's.
# $OUT takes files of <= 16 MiB: fetch only what is missing (the full tarball of 12 runs is 18 MB).
set -u
R=$PWD
mkdir -p /tmp/nr && tar xJf .nsysslim/nsys-slim.tar.xz -C /tmp/nr
export TRACEDIFF_NSYS=/tmp/nr/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys
export PATH=/opt/torch/.venv/bin:$PATH
# a fixed repo (same commit hash in every call, so a later call resumes the same run sets)
rm -rf /tmp/w && mkdir -p /tmp/w/capture && cp -r capture/workload /tmp/w/capture/ && cd /tmp/w
git init -q -b main && git add -A
export GIT_AUTHOR_DATE="2026-12-01T10:00:00Z" GIT_COMMITTER_DATE="2026-12-01T10:00:00Z"
git -c user.email=t@t -c user.name=tracediff commit -qm "specloop workload" && git log -1 --format=%H
cd $R
mkdir -p /tmp/runs
[ -d devwork/runs ] && cp -a devwork/runs/. /tmp/runs/
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
date -u
env -i PATH="$PATH" HOME="$HOME" LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" TRACEDIFF_NSYS="$TRACEDIFF_NSYS" timeout ${CAP_S:-500} python3 -m tracediff.cli capture --repo /tmp/w --commit HEAD \
  --repeat 4 --variants good,bad,slow-verify -o /tmp/runs/sets --capture-range cudaProfilerApi \
  -- python3 capture/workload/specloop.py --variant {variant} --cycles 20
echo "capture exit $?"; date -u
find /tmp/runs -name '*.qdstrm' -size +50M -print -delete
du -sh /tmp/runs; ls /tmp/runs/sets/*/
tar czf $OUT/runs.tgz -C /tmp runs && ls -la $OUT
