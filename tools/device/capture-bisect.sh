#!/bin/bash
# On the lent H200 (device tool `run`, carry [".nsysslim", ".whl"]): issue 18's device case, the
# `specbisect` repo of tools/device/bisect_repo.py, every one of its seven commits captured 4 times,
# interleaved, by one `tracediff capture --repeat 4 --commit c1 ... --commit c7` call: a capture
# pool for `tracediff bisect --pool` (tracediff/bisect/pool.py; bundled as
# tests/data/h200-bisect/pool.tar.xz). Capture's default launch stacks are on, with the python
# nvtx package (.whl/nvtx-0.2.10-*.whl) on PYTHONPATH; specbisect is a script, not a package, so
# they record none (manifest "stacks": "recorded": "none"). BIS_CYCLES: cycles a run (default 12);
# BIS_S bounds the capture (seconds, default 300); BIS_SECOND=CYCLES: then a second pool `pool<N>`
# with that many cycles while BIS_UNTIL_S (default 510) allows. Writes $OUT/bis.txz.partNN (the
# pools with .qdstrm reports, env.txt, commits.txt, log.txt): `cat bis.txz.part* | xz -d | tar xf -`,
# then `QdstrmImporter -i report.qdstrm` per run here (the GPU host has no importer).
set -u
B=/tmp/bis
mkdir -p $B /tmp/nr
exec > >(tee -a $B/log.txt) 2>&1
date -u
[ -x /tmp/nr/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys ] ||
  tar xJf .nsysslim/nsys-slim.tar.xz -C /tmp/nr
export TRACEDIFF_NSYS=/tmp/nr/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys
export PATH=/opt/torch/.venv/bin:$PATH
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .whl/nvtx-0.2.10-*.whl || echo "nvtx wheel not installed"
{
  date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  python3 -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.nccl.version())'
  PYTHONPATH=/tmp/site python3 -c 'import nvtx; print("nvtx", nvtx.__file__)'
  $TRACEDIFF_NSYS --version; git --version; git rev-parse HEAD
} > $B/env.txt 2>&1
cat $B/env.txt
[ -d /tmp/sb ] || python3 tools/device/bisect_repo.py /tmp/sb > $B/commits.txt
cat $B/commits.txt
ca=(); for c in $(awk '{print $1}' $B/commits.txt); do ca+=(--commit $c); done
# tracediff capture in the device's Python (torch, no polars), the environment cut to what the
# workload needs; resumable (a second call while the machine is warm picks up /tmp/bis)
cap() {  # SECONDS_LIMIT POOL_NAME CYCLES
  env -i PATH="$PATH" HOME="$HOME" LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" PYTHONPATH=/tmp/site \
    TRACEDIFF_NSYS="$TRACEDIFF_NSYS" timeout $1 python3 -m tracediff.cli capture --repo /tmp/sb \
    "${ca[@]}" --repeat 4 -o $B/$2 --capture-range cudaProfilerApi -- python3 specloop.py \
    --cycles $3
  echo "capture $2 exit $?"; date -u
}
cap ${BIS_S:-300} pool ${BIS_CYCLES:-12}
find $B -name '*.qdstrm' -size +50M -print -delete
if [ -n "${BIS_SECOND:-}" ]; then
  T=$((${BIS_UNTIL_S:-510} - SECONDS)); echo "left $T s"
  [ $T -gt 60 ] && cap $T pool$BIS_SECOND $BIS_SECOND
  find $B -name '*.qdstrm' -size +50M -print -delete
fi
grep -h -o '"recorded": "[^"]*"' $B/pool/*/run-01/manifest.json | sort | uniq -c
du -sh $B/*; cd /tmp && tar cf - bis | xz -T0 -2 | split -b 15000000 -d - $OUT/bis.txz.part
ls -la $OUT
