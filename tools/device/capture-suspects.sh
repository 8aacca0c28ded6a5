#!/bin/bash
# On the lent H200 (device tool `run`, carry [".nsysslim", ".whl"]): issue 19's device case, the
# `minispec` repo of tools/device/suspects_repo.py at its five commits, captured
#   - MAIN=1 (default): under nsys by `tracediff capture --repeat 1 --variants eager,graph` (one
#     run set per commit and mode) with capture's own default launch stacks: the function-trace
#     config it writes for the worktree's packages (capture/stacks.py: domains
#     `python:minispec.layers` ...), which needs the python nvtx package (.whl/nvtx-0.2.10-*.whl
#     on PYTHONPATH). capture passes --cuda-graph-trace=node, and bench.py captures its CUDA graph
#     after cudaProfilerStart, so the graph's capture phase (node creation, the launches' stacks)
#     is inside the window;
#   - AGAIN=1 (default): a second capture of the base commit, eager and graph (stack ids across
#     runs of one commit);
#   - the overhead of the function trace: OVERHEAD rounds (default 3) on the base commit, each one
#     capture with stacks and one with --no-stacks, eager and graph, OVERHEAD_CYCLES cycles
#     (default 100); the .qdstrm come back (the cycle ranges' durations), and bench.py prints
#     ms_per_cycle into capture.log;
#   - KINETO=1 (default): the PyTorch profiler (with_stack=True; bench.py --kineto) per commit
#     and mode.
# Writes $OUT/suspects.tgz.partNN (nsys/, again/, overhead/ run sets with .qdstrm, kineto/,
# env.txt, log.txt, commits.txt): `cat suspects.tgz.part* | tar xzf -`. There is no
# QdstrmImporter on the GPU host: import the .qdstrm on the CPU machine (nsys 2024.2.3's
# `QdstrmImporter -i`). .nsysslim/nsys-slim.tar.xz is made by tools/device/slim-nsys.sh; the wheel
# by the device README's `pip download` line (nvtx==0.2.10: 0.2.17 records no ranges under nsys
# 2024.2).
set -u
R=$PWD
S=/tmp/sus
mkdir -p $S/kineto /tmp/nr
exec > >(tee $S/log.txt) 2>&1
date -u; pwd
tar xJf .nsysslim/nsys-slim.tar.xz -C /tmp/nr
export TRACEDIFF_NSYS=/tmp/nr/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys
export PATH=/opt/torch/.venv/bin:$PATH
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .whl/nvtx-0.2.10-*.whl || echo "nvtx wheel not installed"
{
  date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  python3 -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda)'
  $TRACEDIFF_NSYS --version; git --version
} > $S/env.txt 2>&1
cat $S/env.txt
python3 tools/device/suspects_repo.py /tmp/ms | tee $S/commits.txt
COMMITS=$(awk '{print $1}' $S/commits.txt)
base=$(echo $COMMITS | awk '{print $1}')
# tracediff capture in the device's Python (torch, no polars: capture needs none), the caller's
# environment cut to what the workload needs; PYTHONPATH holds the nvtx package
cap() {
  env -i PATH="$PATH" HOME="$HOME" LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" PYTHONPATH=/tmp/site \
    TRACEDIFF_NSYS="$TRACEDIFF_NSYS" python3 -m tracediff.cli capture --repo /tmp/ms \
    --capture-range cudaProfilerApi "$@"
}
# smoke: the default function trace on the base commit, graph mode (a hang costs 60 s, not 5 min)
timeout 60 bash -c "$(declare -f cap); cap --commit $base -o /tmp/smoke -- python3 bench.py \
  --mode graph --cycles 2"
echo "smoke exit $?"; ls -la /tmp/smoke; grep -o '"recorded": "[^"]*"' /tmp/smoke/manifest.json
if [ ! -f /tmp/smoke/report.qdstrm ] || [ $(stat -c %s /tmp/smoke/report.qdstrm) -gt 50000000 ]; then
  echo "smoke failed: no nsys captures"; NSYS_S=0
fi
date -u
cargs=(); for c in $COMMITS; do cargs+=(--commit $c); done
[ ${MAIN:-1} = 1 ] && [ ${NSYS_S:-300} -gt 0 ] && timeout ${NSYS_S:-300} bash -c "$(declare -f cap)
  cap ${cargs[*]} --repeat 1 --variants eager,graph -o $S/nsys -- python3 bench.py \
  --mode {variant} --cycles 12"
echo "capture exit $?"; date -u
[ ${AGAIN:-1} = 1 ] && [ ${NSYS_S:-300} -gt 0 ] && timeout 120 bash -c "$(declare -f cap)
  cap --commit $base --repeat 1 --variants eager,graph -o $S/again -- python3 bench.py \
  --mode {variant} --cycles 12"
echo "again exit $?"
# overhead of the function trace: stacks on / --no-stacks, interleaved rounds, same commit
for i in $(seq 1 ${OVERHEAD:-3}); do
  for s in on off; do
    [ $SECONDS -gt ${OVERHEAD_UNTIL_S:-480} ] && { echo "overhead $i $s skipped (time)"; continue; }
    flag=(); [ $s = off ] && flag=(--no-stacks)
    timeout 120 bash -c "$(declare -f cap); cap --commit $base ${flag[*]} --repeat 1 \
      --variants eager,graph -o $S/overhead/$s-$i -- python3 bench.py --mode {variant} \
      --cycles ${OVERHEAD_CYCLES:-100}"
    echo "overhead $i $s exit $?"
    for m in eager graph; do
      echo "overhead $s $i $m $(grep -o 'ms_per_cycle=[0-9.]*' $S/overhead/$s-$i/$m/run-01/capture.log)"
    done
  done
done
date -u
n=0
for c in $COMMITS; do
  n=$((n + 1)); role=$(awk -v c=$c '$1 == c {print $2}' $S/commits.txt)
  for m in eager graph; do
    [ ${KINETO:-1} = 1 ] || continue
    git -C /tmp/ms worktree add -q --detach /tmp/msw/${c:0:12} $c 2>/dev/null
    f=$S/kineto/c${n}_${role}_$m.json
    [ $SECONDS -gt ${KINETO_UNTIL_S:-500} ] && { echo "kineto $role $m skipped (time)"; continue; }
    (cd /tmp/msw/${c:0:12} && timeout 40 python3 bench.py --mode $m --cycles 10 --kineto $f)
    echo "kineto $role $m exit $?"; [ -f $f ] && gzip -9 $f
  done
done
date -u
find $S -name '*.qdstrm' -size +50M -print -delete
du -sh $S/*; find $S -name '*.qdstrm' -printf '%s %p\n'
cd /tmp && tar czf - sus | split -b 15000000 -d - $OUT/suspects.tgz.part && ls -la $OUT
