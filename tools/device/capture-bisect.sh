#!/bin/bash
# On the lent H200 (device tool `run`, carry [".nsysslim"]): issue 18's device case, the
# `specbisect` repo of tools/device/bisect_repo.py, every one of its seven commits captured 4 times,
# interleaved, by one `tracediff capture --repeat 4 --commit c1 ... --commit c7` call: a capture
# pool for `tracediff bisect --pool` here (capture/bisect_pool.py). Resumable: a second call while
# the machine is still warm picks up /tmp/bis. Writes $OUT/bisect.tgz (the pool with .qdstrm
# reports, env.txt, commits.txt, log.txt). BIS_S bounds the capture (seconds, default 330).
set -u
B=/tmp/bis
mkdir -p $B /tmp/nr
exec > >(tee -a $B/log.txt) 2>&1
date -u
[ -x /tmp/nr/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys ] ||
  tar xJf .nsysslim/nsys-slim.tar.xz -C /tmp/nr
export TRACEDIFF_NSYS=/tmp/nr/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys
export PATH=/opt/torch/.venv/bin:$PATH
{
  date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  python3 -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.nccl.version())'
  $TRACEDIFF_NSYS --version; git --version
} > $B/env.txt 2>&1
cat $B/env.txt
[ -d /tmp/sb ] || python3 tools/device/bisect_repo.py /tmp/sb > $B/commits.txt
cat $B/commits.txt
cargs=(); for c in $(awk '{print $1}' $B/commits.txt); do cargs+=(--commit $c); done
env -i PATH="$PATH" HOME="$HOME" LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" \
  TRACEDIFF_NSYS="$TRACEDIFF_NSYS" timeout ${BIS_S:-330} python3 -m tracediff.cli capture \
  --repo /tmp/sb "${cargs[@]}" --repeat 4 -o $B/pool --capture-range cudaProfilerApi \
  -- python3 specloop.py --cycles 12
echo "capture exit $?"; date -u
find $B -name '*.qdstrm' -size +50M -print -delete
du -sh $B/pool; cd /tmp && tar czf $OUT/bisect.tgz bis && ls -la $OUT
