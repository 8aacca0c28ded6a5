#!/bin/bash
# On the lent H200 (device tool `run`, carry [".nsysslim", ".whl"]): issue 19's device case, the
# `minispec` repo of tools/device/suspects_repo.py at its five commits, captured
#   - under nsys by `tracediff capture --repeat 1 --variants eager,graph` (one run set per commit
#     and mode), with --python-functions-trace for minispec's functions (NVTX ranges
#     `minispec.layers.mlp` ...; needs the python nvtx package: .whl/nvtx-0.2.10-*.whl) when a
#     short smoke capture with it succeeds, else without;
#   - with the PyTorch profiler (with_stack=True; bench.py --kineto) per commit and mode.
# Writes $OUT/suspects.tgz (nsys/ run sets with .qdstrm, kineto/*.json.gz, env.txt, log.txt).
# .nsysslim/nsys-slim.tar.xz is made by tools/device/slim-nsys.sh; the wheel by the device
# README's `pip download` line (nvtx==0.2.10: 0.2.17 records no ranges under nsys 2024.2).
set -u
R=$PWD
S=/tmp/sus
mkdir -p $S/kineto /tmp/nr
exec > >(tee $S/log.txt) 2>&1
date -u; pwd; ls tools/device
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
cat > /tmp/ftrace.json <<'EOF'
[{"domain": "minispec", "module": "minispec.layers", "functions": ["norm", "attend", "mlp"]},
 {"domain": "minispec", "module": "minispec.model", "functions": ["block", "forward"]}]
EOF
for c in $COMMITS; do git -C /tmp/ms worktree add -q --detach /tmp/msw/${c:0:12} $c; done
base=$(echo $COMMITS | awk '{print $1}')
# smoke: the slim nsys with the function trace, on the base commit (a hang here costs 45 s, not 4 min)
FT=(--nsys-arg=--python-functions-trace=/tmp/ftrace.json)
(cd /tmp/msw/${base:0:12} && PYTHONPATH=/tmp/site timeout 45 $TRACEDIFF_NSYS profile -t cuda,nvtx \
  --sample=none --cpuctxsw=none --cuda-graph-trace=node --capture-range=cudaProfilerApi \
  --python-functions-trace=/tmp/ftrace.json -o /tmp/smoke python3 bench.py --cycles 2)
echo "smoke exit $?"; ls -la /tmp/smoke.qdstrm || FT=()
[ -f /tmp/smoke.qdstrm ] && [ $(stat -c %s /tmp/smoke.qdstrm) -gt 50000000 ] && FT=()
echo "function trace: ${FT[*]:-off}"
date -u
cargs=(); for c in $COMMITS; do cargs+=(--commit $c); done
env -i PATH="$PATH" HOME="$HOME" LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" PYTHONPATH=/tmp/site \
  TRACEDIFF_NSYS="$TRACEDIFF_NSYS" timeout ${NSYS_S:-240} python3 -m tracediff.cli capture \
  --repo /tmp/ms "${cargs[@]}" --repeat 1 --variants eager,graph -o $S/nsys \
  --capture-range cudaProfilerApi "${FT[@]}" -- python3 bench.py --mode {variant} --cycles 12
echo "capture exit $?"; date -u
n=0
for c in $COMMITS; do
  n=$((n + 1)); role=$(awk -v c=$c '$1 == c {print $2}' $S/commits.txt)
  for m in eager graph; do
    f=$S/kineto/c${n}_${role}_$m.json
    [ $SECONDS -gt ${KINETO_UNTIL_S:-500} ] && { echo "kineto $role $m skipped (time)"; continue; }
    (cd /tmp/msw/${c:0:12} && timeout 40 python3 bench.py --mode $m --cycles 10 --kineto $f)
    echo "kineto $role $m exit $?"; [ -f $f ] && gzip -9 $f
  done
done
date -u
find $S -name '*.qdstrm' -size +50M -print -delete
du -sh $S/*; cd /tmp && tar czf $OUT/suspects.tgz sus && ls -la $OUT
