#!/bin/bash
# On the lent H200 (carry [".nsysslim", ".whl"]): what nsys's --python-functions-trace costs per
# Python call, in the device's Python. A package `ftpkg` with a traced function `traced` and an
# untraced `plain`; loop.py calls each N times and prints ns per call. Runs, interleaved, ROUNDS
# times: under nsys (-t nvtx, no sampling) with the function trace of `traced`, and without it.
# Prints `cost MODE FUNCTION ns_per_call` lines; nothing comes back but the log.
set -u
mkdir -p /tmp/nr /tmp/ft/ftpkg && cd /tmp/ft
if [ -z "${FT_NSYS:-}" ]; then  # FT_NSYS: an nsys and a python3 with nvtx already (a dry run here)
  tar xJf $OLDPWD/.nsysslim/nsys-slim.tar.xz -C /tmp/nr
  export PATH=/opt/torch/.venv/bin:$PATH
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
    $OLDPWD/.whl/nvtx-0.2.10-*.whl
fi
N=${FT_NSYS:-/tmp/nr/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys}
touch ftpkg/__init__.py
printf 'def traced(x):\n    return x + 1\n\n\ndef plain(x):\n    return x + 1\n' > ftpkg/work.py
cat > loop.py <<'PY'
import sys, time
from ftpkg.work import plain, traced
n = int(sys.argv[1])
for name, f in (("traced", traced), ("plain", plain)):
    for _ in range(2):  # the second pass is the one printed (warm)
        t = time.perf_counter_ns(); x = 0
        for _ in range(n):
            x = f(x)
        dt = (time.perf_counter_ns() - t) / n
    print(f"{name} {dt:.1f}")
PY
echo '[{"domain": "python:ftpkg.work", "module": "ftpkg.work", "functions": ["traced"]}]' > ft.json
for i in $(seq 1 ${ROUNDS:-3}); do
  for mode in on off; do
    ft=(); [ $mode = on ] && ft=(--python-functions-trace=/tmp/ft/ft.json)
    PYTHONPATH=/tmp/site:/tmp/ft timeout 120 $N profile -t nvtx --sample=none --cpuctxsw=none \
      "${ft[@]}" --force-overwrite=true -o /tmp/ft/r-$mode-$i python3 loop.py ${CALLS:-200000} \
      > /tmp/ft/log-$mode-$i.txt 2>&1
    echo "round $i $mode exit $?"
    grep -E '^(traced|plain) ' /tmp/ft/log-$mode-$i.txt | sed "s/^/cost $mode /"
  done
  PYTHONPATH=/tmp/ft python3 loop.py ${CALLS:-200000} | sed "s/^/cost bare /"
done
ls -la /tmp/ft | head -20
