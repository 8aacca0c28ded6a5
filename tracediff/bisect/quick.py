"""`tracediff bisect`'s cycle-time comparisons from each run's mean: what a step asks of
`compare` when the cycle time is followed, without reducing every run of both ends again.

Stage: bisect (tracediff/bisect/step.py and rest.py call `Bisection.quick`). Input: the runs of
two sides; output: the cycle time's change, 95 % CI, p-value and significance, as the engine's
comparison of those run sets gives them (`CycleOnly`, read by bisect/follow.quantities).

Why. Profiled (cProfile of the bisect process, a 4-commit NVTX bisection at load 16), bisect's
own time was 46 s of 262 s wall (21 % of the captures' 216 s), 40.7 s of it in 17 engine
compares, 2.4 s each: the across-run CI inversion over every host phase (26 s) and the phases'
polars work (17 s). A step decides on the cycle time alone, and with each end taken on all its
runs so far (bisect/bisection.evidence) every step compared the ends' runs again. Each run's
mean cycle time depends on that run alone (engine/statistics/verdict.run_means_ms: the run's
cycles, summed in order), so it is kept from the first full comparison that has it (`Means`);
the across-run test on those means is the engine's own (runstats.across_runs with verdict's
significance rule), so the numbers are those a full comparison of the same runs gives
(tests/unit/test_bisect_quick.py). A side with a run whose mean is not kept, or fewer than 2
runs (the engine's test is then over cycles), goes through the full comparison.

Host-only runs (NVTX, no GPU operations) have their means read from each run alone
(`Means.learn_host`), so that no step waits for a comparison to have kept them. Profiled again
(session 13, seed 213 of the culprit sweep beside its two CPU hogs, load 8-17, py-spy): 68 s of
own time beside 308 s of captures, 37 s of it in engine comparisons that quick() fell back to
because a step's fresh runs of its ends (and a share's or a confirmation's runs) had no kept
mean, 12 s in the across-run CI here, most of that building the split matrices
(runstats._weights, now filled as one array).

One BLAS thread (`one_blas_thread`, for the bisect process only: its captures are other
processes; the CLI also sets OPENBLAS_NUM_THREADS=1 where the user has not, kept out of captured
workloads by TRACEDIFF_SET_ALLOC, and this call holds bisect to one thread where the user has). The across-run CI is inverted by 2 x 48 permutation tests, each a product of the
runs with every split (43,758 at 10 v 8 runs); at a load of 13-16 on the 2 shared cores
OpenBLAS's default threads made one such test 1.9-3.4 s, one thread 0.2-0.9 s (interleaved,
same process and data).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tracediff.engine.statistics import runstats as rs
from tracediff.engine.statistics import stats as st


@dataclass(frozen=True)
class CycleOnly:
    """The cycle-time fields of a comparison of two run sets (engine/statistics/verdict.py)."""

    delta_ms_per_cycle: float
    delta_ci95: tuple[float, float]
    significant: bool
    p_value: float | None


class Means:
    """Each run's mean cycle time (ms), by run file, from the comparisons made so far or from
    each host-only run alone (`learn_host`)."""

    def __init__(self) -> None:
        self.of: dict[str, float] = {}
        self._rules: dict[tuple[str, str | None], Any] = {}  # (ref run, --cycle): its cycle rule
        self._host: dict[str, bool] = {}  # run file: no GPU operations (host-only)

    def keep(self, runs: Sequence[Any], side: Any) -> None:
        """The means of `runs` as comparison side `side` has them (in run order; not kept when
        a run had no cycle, so that the means cannot be matched to the runs)."""
        means = getattr(side, "run_means_ms", ())
        if len(runs) >= 2 and len(means) == len(runs):
            self.of.update({r.path: float(m) for r, m in zip(runs, means, strict=True)})

    def get(self, runs: Sequence[Any]) -> list[float] | None:
        """The kept means of `runs`, None when one is not kept."""
        try:
            return [self.of[r.path] for r in runs]
        except KeyError:
            return None

    def learn_host(self, runs: Sequence[Any], ref: Any, cycle: str | None) -> bool:
        """Keep the means of those of `runs` not kept yet, each from its run alone, as an engine
        comparison whose base's first run is `ref` gives them where `ref` and they are host-only
        runs (engine/hostonly.compare_host: each run cut at the host range that ref's rule names,
        `cycle` or found on ref; its mean over its cycles' wall times by runstats.run_means, whose
        sums go cycle by cycle, so one run alone sums as it does among others). False, nothing
        kept, where one has GPU operations (the engine's GPU path: a comparison keeps them) or no
        cycle. A step's fresh runs of its ends, an undecided share's extra runs and a
        confirmation's fresh runs had each sent a step to the full comparison (bisect's own time,
        issue 31: 12 comparisons of ~0.9 s in a seed at load 8)."""
        todo = list({r.path: r for r in runs if r.path not in self.of}.values())
        if not todo:
            return True
        if not all(self.host_only(r) for r in [ref, *todo]):
            return False
        from tracediff.engine.cycle.ranges import host_only
        from tracediff.engine.cycle.segmentation import CycleRule
        from tracediff.engine.statistics.verdict import host_walls

        key = (ref.path, cycle)
        if key not in self._rules:
            self._rules[key] = host_only(ref, CycleRule.range_named(cycle) if cycle else None).rule
        got = {}
        for r in todo:
            walls = host_walls(host_only(r, self._rules[key]))
            if walls is None or len(walls) == 0:
                return False
            one = rs.run_means(walls[None, :], np.zeros(len(walls), dtype=np.int64), 1)
            got[r.path] = float(one[0, 0])
        self.of.update(got)
        return True

    def host_only(self, run: Any) -> bool:
        """Whether `run` has no GPU operations (no kernel or copy rows: the engine's no_ops,
        engine/pipeline/reduce.py, holds then; a run whose every op is dropped as broken goes
        through the comparison instead)."""
        if run.path not in self._host:
            self._host[run.path] = all(
                run.read(t, ["start_ns"]).num_rows == 0 for t in ("kernels", "memops")
            )
        return self._host[run.path]


def one_blas_thread() -> bool:
    """Tell numpy's bundled OpenBLAS to use one thread in this process (False where it is not
    found: another BLAS, or none bundled; nothing changes then). Not through the environment,
    which the captured workloads would inherit."""
    import numpy

    libs = Path(numpy.__file__).parent.parent / "numpy.libs"
    for path in sorted(libs.glob("*openblas*.so*")) if libs.is_dir() else []:
        try:
            lib = ctypes.CDLL(os.fspath(path))
        except OSError:
            continue
        for name in (
            "scipy_openblas_set_num_threads64_",
            "scipy_openblas_set_num_threads",
            "openblas_set_num_threads64_",
            "openblas_set_num_threads",
        ):
            f = getattr(lib, name, None)
            if f is not None:
                f(1)
                return True
    return False


def cycle_only(base: list[float], head: list[float]) -> CycleOnly:
    """The cycle time's comparison of two run sets from their run means, as
    engine/statistics/verdict.verdict makes it across runs."""
    t = rs.across_runs(np.array([base]), np.array([head]))
    d = float(t.delta_ms[0])
    low, high = float(t.ci95_low[0]), float(t.ci95_high[0])
    return CycleOnly(
        delta_ms_per_cycle=d,
        delta_ci95=(low, high),
        significant=bool((low > 0 or high < 0) and abs(d) >= st.MIN_EFFECT_MS),
        p_value=float(t.p_value[0]),
    )
