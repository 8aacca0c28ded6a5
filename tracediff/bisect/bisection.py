"""`tracediff bisect`: which first-parent commit between GOOD and BAD made the workload slower.

Stage: bisect (outside the profiled process; drives capture/runsets.py and the engine). Input: a
`CaptureSpec` template, GOOD, BAD, N; output: one run set per commit under OUTDIR (every capture
made by `capture_runsets`, as `tracediff capture --repeat` makes them), OUTDIR/bisect.json (state,
step log, result: tracediff/bisect/state.py) and the result dict that `tracediff/commands/bisect.py`
renders. The git history it walks is read by capture/worktree.py.

Algorithm (after Chromium Pinpoint):

1. Capture GOOD and BAD interleaved, N runs each (one `capture_runsets` call: A B B A ...).
   Compare them as run sets (engine `compare` on lists of runs: each run's mean is one sample,
   exact permutation test, engine/statistics/runstats.py). What to follow: `--contributor REGEX` when given
   (the attribution rows whose name matches), else the cycle time when it has moved across
   runs, else the contributors that have (GPU work as in engine/statistics/gate.py; host phases for
   NVTX-only runs). "Moved" is tracediff/bisect/ends.py's rule, which accounts for the looks (the
   ends are tested again each time runs are added: the cycle time's round-blocked test,
   engine/statistics/blocked.py, controls its error over all looks exactly) and for the many rows tested
   (a row must be large against its run-to-run noise and carry >= 10 % of the rows' change).
   Not told apart: 2 more runs a side, up to --max-runs; nothing moved then: "nothing to
   bisect", or "not decided" with the --max-runs that would decide it (NothingToBisect; exit 5
   in the CLI, which prints that command).
2. Binary search over `git rev-list --first-parent GOOD..BAD` (ordered by the commit suspects
   where the ends' runs carry launch stacks, within the same bound: tracediff/bisect/order.py).
   At a commit X: capture N runs, interleaved with N/4 fresh runs of each of the range's ends
   (X X A B X X: each set's mean capture time the call's middle, capture/runsets.spread;
   OUTDIR/step-<X12>/; without a pool), and compare GOOD->X and X->BAD, each end on all its
   runs so far (`Bisection.evidence`: its own run set and its fresh runs from the steps taken
   up to this one). The fresh runs put part of each end's evidence beside X's in time (a
   culprit measured against GOOD's run set captured minutes before alone had shown 36 % of the
   change at a load of 17 and come out like good; with fresh runs of the like-good end only,
   X -> BAD still compared captures minutes apart: seed 213 of the under-load sweep named a
   commit after the culprit, 94 captures). N fresh runs of one end a step had cost
   2N + 3 x 2N = 32 captures for a lone culprit in 7 commits, against 1.5 x the bound (30):
   N/4 of each end keeps a step at 1.5 N. Per followed quantity, with D the GOOD->BAD change:
   - differs from GOOD (significant, same direction as D) and not from BAD: like bad;
   - differs from BAD and not from GOOD: like good;
   - differs from both (X sits between the ends: two culprits): like bad when X has moved at
     least half of D (the change X->GOOD is >= D/2), else like good; a near-tie (the CI of
     X's part of D straddles the half) is undecided;
   - differs from neither: undecided -> 2 more runs at X, up to --max-runs; still undecided at the
     cap: decided by which end X is closer to, and flagged (`by: "closeness"`) in the log.
   Several followed contributors vote, each weighing its |GOOD->BAD change|: like bad (good)
   when those saying so hold more than half the weight, else undecided (bisect/step.vote).
   A commit whose workload fails (or whose capture fails) is skipped, as `git bisect skip`; its
   neighbours nearest the middle are tried instead. When only skipped commits remain between the
   last like-good and first like-bad commit, the culprit is that range (reported as such).
3. Beside each culprit (tracediff/bisect/rest.py, step by step): its share of its range, the
   ranges beside it looked at on the runs already captured, more runs at its parent and itself
   while that share is undecided (as at an undecided step), and only a side that looks moved
   (or sits beside a step that differed from both its ends, or a share below
   SHARE_TO_CONTINUE) confirmed on N fresh interleaved runs of its ends; a confirmed side is
   searched the same way, up to MAX_CULPRITS culprits. A culprit beside another, and every
   culprit of a later search, has its share measured again on N fresh interleaved runs of its
   parent and itself (tracediff/bisect/share.py: drift between run sets captured minutes apart
   had put a true half at 0.87). `first_bad` is the culprit of the first search, unless its
   fresh runs did not see its change again and a later culprit's did (bisect/result.first_bad).

Captures are counted against the bound of a plain binary search, 2N + ceil(log2(commits)) * N,
plus the extra runs (beyond N at a commit: undecided steps and shares), the failed runs, the
confirmation runs and the fresh runs of each step's ends (a quarter of a step's runs each);
every run in OUTDIR's run sets is counted, by commit (tracediff/bisect/result.py).

Resume: every run set is resumed by capture_runsets (finished runs reused); decisions are
recomputed from the captures (the run-level test is exact, so the same runs give the same
decisions); skipped commits are remembered in bisect.json and not retried. Ctrl-C between or
during runs leaves that state: the same command again continues.
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from capture import worktree as wt
from capture.runner import CaptureSpec
from capture.runsets import capture_runsets, plan_sets
from tracediff.base.errors import InputError, OutputError, TracediffError, UsageError
from tracediff.bisect import ends as be
from tracediff.bisect import follow as bf
from tracediff.bisect import pool as bp
from tracediff.bisect import quick as bq
from tracediff.bisect import state as bstate
from tracediff.bisect.follow import Q
from tracediff.engine.compare import compare
from tracediff.parse import sides
from tracediff.runs import runset as rs

SHARE_TO_CONTINUE = 0.6
MAX_CULPRITS = 4
RUNS_PER_EXTRA = 2
FRESH_PART = 4
"""A step captures one fresh run of each end of its range per FRESH_PART runs of its commit."""


class NothingToBisect(TracediffError):
    """GOOD and BAD are not told apart across runs (tracediff/bisect/ends.py; exit 5): "nothing to
    bisect", or "not decided" where a one-look test calls the change significant;
    `plan_max_runs`: about how many runs a side would decide it (None: no change to plan for)."""

    exit_code = 5
    plan_max_runs: int | None = None
    plan_longer: be.LongerRuns | None = None  # longer runs that would decide it more cheaply
    verdict: str = "nothing to bisect"


class BisectInterrupted(TracediffError):
    """A capture was interrupted; the state is kept for the same command to resume (exit 130)."""

    exit_code = 130


@dataclass
class BisectSpec:
    capture: CaptureSpec  # template: repo, command, nsys options; outdir = OUTDIR
    good: str
    bad: str
    repeat: int = 4
    max_runs: int | None = None  # default 2 * repeat
    contributor: str | None = None
    cycle: str | None = None
    pool: Path | None = None  # --pool DIR: runs taken from there first (tracediff/bisect/pool.py)
    suspects: bool = True  # order the search by the commit suspects (tracediff/bisect/order.py)


@dataclass
class Bisection:
    spec: BisectSpec
    say: Callable[[str], None]
    outdir: Path = field(init=False)
    commits: list[str] = field(init=False)  # [good, c1, ..., bad]
    state: dict[str, Any] = field(init=False)
    captured: int = 0
    reused: int = 0
    skipped_now: set[str] = field(default_factory=set)  # skipped commits met by this call
    exhausted: list[str] = field(default_factory=list)  # undecided: the pool had too few runs
    loaded: dict[str, tuple[list[Path], list[Any]]] = field(default_factory=dict)  # by folder
    short: dict[str, str] = field(default_factory=dict)  # a run failed after others finished
    t0: float = field(default_factory=time.monotonic)  # this call's start
    stepped: list[str] = field(default_factory=list)  # the steps' commits, in order (evidence)
    means: bq.Means = field(default_factory=bq.Means)  # each run's mean cycle time (bisect/quick)
    # run sets read only up to a count: a share's extra runs as its look had them, so that a
    # resumed call (whose folder already holds all of them) logs every look as the first did
    limits: dict[str, int] = field(default_factory=dict)
    # the workload's Python probed once per commit for the whole call, not once per step's
    # capture_runsets (capture/manifest.python_info: ~0.25 s a probe, 5 probes where 11 were)
    probes: dict[Any, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        s = self.spec
        if s.repeat < 2:
            raise UsageError(f"--repeat {s.repeat}: bisect needs >= 2 runs a commit (4: 5 %)")
        self.max_runs = s.max_runs or 2 * s.repeat
        if self.max_runs < s.repeat:
            raise UsageError(f"--max-runs {self.max_runs} is below --repeat {s.repeat}")
        if s.contributor is not None:
            try:
                re.compile(s.contributor)
            except re.error as e:
                raise UsageError(f"--contributor {s.contributor!r}: not a regex ({e})") from None
        self.repo = wt.toplevel(s.capture.repo)
        good, bad = wt.resolve(self.repo, s.good), wt.resolve(self.repo, s.bad)
        if good == bad:
            raise UsageError("--good and --bad are the same commit")
        if not wt.is_ancestor(self.repo, good, bad):
            raise UsageError(
                f"--good {s.good} is not an ancestor of --bad {s.bad}",
                "bisect walks first-parent history from GOOD to BAD; swap them?",
            )
        self.commits = [good] + wt.first_parent(self.repo, good, bad)
        self.outdir = Path(s.capture.outdir)
        self.live = bool(s.capture.command) or s.capture.preset is not None
        self.pool = None if s.pool is None else bp.open_pool(s.pool, self.repo, self.commits)
        if self.pool is not None and self.live:
            bp.check_command(self.pool, list(s.capture.command), s.capture.preset)
        if self.pool is None and not self.live:
            raise UsageError("no workload given", "add `-- COMMAND ARGS...` at the end, or --pool")
        self.from_pool: dict[str, int] = {}  # runs of each commit taken from the pool

    # ---- state (tracediff/bisect/state.py) ---------------------------------------------------

    def hold(self) -> contextlib.AbstractContextManager[None]:
        """OUTDIR checked to be a bisection's (or created) and locked for the call."""
        return bstate.hold(self.outdir)

    def _key(self) -> dict[str, Any]:
        s = self.spec
        return {
            "good": self.commits[0],
            "bad": self.commits[-1],
            "repeat": s.repeat,
            "max_runs": self.max_runs,
            "contributor": s.contributor,
            "cycle": s.cycle,
            "pool": None if s.pool is None else str(Path(s.pool).resolve()),
            "live": self.live,
        }

    def load_state(self) -> None:
        self.state = bstate.load(self.outdir, self._key())

    def save(self) -> None:
        self.state["wall_s_call"] = round(time.monotonic() - self.t0, 1)
        bstate.save(self.outdir, self.state)

    def wall_s(self) -> float:
        """The whole bisection's wall time: the earlier calls' (a resume) and this one's."""
        return round(float(self.state.get("wall_s_before", 0.0)) + time.monotonic() - self.t0, 1)

    def log(self, entry: dict[str, Any]) -> None:
        """Append a step; a step recomputed on resume from captures an earlier call made (the
        same place in the log, commit and pair) keeps the time that call spent on it."""
        log, earlier = self.state["log"], self.state.get("earlier_log", [])
        i = len(log)
        if i < len(earlier) and "wall_s" in entry:
            e = earlier[i]
            same = e.get("commit") == entry.get("commit") and e.get("against") == entry.get(
                "against"
            )
            if same and isinstance(e.get("wall_s"), int | float):
                entry["wall_s"] = round(float(e["wall_s"]) + float(entry["wall_s"]), 1)
        log.append(entry)
        self.save()

    def entry(self, sha: str, against: str | None = None, pool: bool = False) -> dict[str, Any]:
        """The head of a step log entry: its number, its commit and (a pair) the commit it is
        compared against, their runs in their own run sets ([against's, sha's] for a pair) and,
        with `pool`, how many of those came from the pool."""
        shas = [sha] if against is None else [against, sha]
        runs = [self.n_runs(x) for x in shas]
        head: dict[str, Any] = {"step": len(self.state["log"]), "commit": sha}
        if against is not None:
            head["against"] = against
        head["runs"] = runs[0] if against is None else runs
        if pool:
            took = [self.from_pool.get(x, 0) for x in shas]
            head["from_pool"] = took[0] if against is None else took
        return head

    # ---- captures and comparisons ----------------------------------------------------------

    def folder(self, sha: str) -> Path:
        """sha's own run set: OUTDIR/<sha12>, or, for a step's commit captured interleaved with
        fresh runs of the end it is compared against, OUTDIR/step-<sha12>/<sha12>."""
        paired = self.step_dir(sha) / sha[:12]
        return paired if (paired / rs.INDEX).is_file() else self.outdir / sha[:12]

    def step_dir(self, sha: str) -> Path:
        """Where a step at sha captures it interleaved with fresh runs of its range's ends."""
        return self.outdir / f"step-{sha[:12]}"

    def fresh(self, sha: str, against: str) -> Path | None:
        """The fresh runs of `against` (an end of sha's step) captured interleaved with sha's
        (None: there are none: a pool's runs, or sha captured alone or beside its like-good end
        only by an earlier version)."""
        f = self.step_dir(sha) / against[:12]
        return f if self.folder(sha).parent == self.step_dir(sha) and runs_in(f) else None

    def _count(self, r: Any) -> None:
        self.captured += r.captured
        self.reused += r.reused
        if r.exit_code == 130:
            self.save()
            raise BisectInterrupted(
                f"interrupted: {r.problem}", "run the same command again to resume"
            )

    def _capture(
        self, outdir: Path, shas: list[str], n: int, counts: list[int] | None = None
    ) -> Any:
        """capture_runsets into outdir. nsys's known transient failures are retried once by the
        capture itself (capture.runner.nsys_lost); another tool failure (git, an nsys failure
        not known as transient) is retried once here, resuming the run sets (the failed slot
        redone, its attempt counted: runset.json failed_attempts); a workload's own exit code
        is not (a commit that does not run is skipped)."""
        spec = replace(self.spec.capture, outdir=outdir, force=False, probe_cache=self.probes)
        r = self._runsets(spec, shas, n, counts)
        if r.exit_code not in (0, 130) and r.tool_failure:
            self.say(f"retrying once: {r.problem}")
            r = self._runsets(spec, shas, n, counts)
        return r

    def _runsets(self, spec: CaptureSpec, shas: list[str], n: int, counts: list[int] | None) -> Any:
        """One capture_runsets call, counted; its "--force" advice does not apply to bisect."""
        try:
            r = capture_runsets(spec, shas, n, None, None, self._progress, counts)
        except OutputError as e:
            if "--force" not in (e.hint or ""):
                raise
            raise OutputError(
                e.message, "bisect never starts a run set over: choose another -o"
            ) from None
        self._count(r)
        return r

    def _pooled(self, sha: str, n: int) -> int:
        """Runs of sha taken from the pool into its folder, up to n (0 without a pool)."""
        if self.pool is None:
            return 0
        if self.live:
            spec = replace(self.spec.capture, outdir=self.folder(sha))
            workload = plan_sets(spec, [sha], None)[0][0].workload  # what live runs check
        else:
            workload = dict(self.pool.workload)
        k = bp.take(self.pool, sha, self.folder(sha), n, workload)
        self.from_pool[sha] = k
        return k

    def capture_ends(self, n: int) -> list[int]:
        """Runs at GOOD and BAD up to n each, interleaved; the counts reached (below n only when
        the pool is exhausted and no workload is given)."""
        ends = [self.commits[0], self.commits[-1]]
        how = (
            "capturing"
            if self.pool is None
            else "taking from the pool" + (" (capturing what it lacks)" if self.live else "")
        )
        self.say(f"{how} the ends: good {ends[0][:12]} and bad {ends[1][:12]}, {n} runs each")
        if self.pool is None:
            r = self._capture(self.outdir, ends, n)
            problem = r.problem if r.exit_code else None
        else:
            pooled = [self._pooled(s, n) for s in ends]
            problem = None
            if self.live and min(pooled) < n:
                # one run at a time in the A B B A order, as capture --repeat interleaves
                need = [n - k for k in pooled]
                for rnd in range(1, max(need) + 1):
                    order = [0, 1] if rnd % 2 else [1, 0]
                    for i in order:
                        if rnd <= need[i] and problem is None:
                            r = self._capture(self.folder(ends[i]), [ends[i]], rnd)
                            problem = r.problem if r.exit_code else None
        if problem is not None:
            raise TracediffError(
                f"an end of the range does not run: {problem}",
                "bisect needs GOOD and BAD to run; fix the command, or pick other ends",
            )
        got = [self.n_runs(s) for s in ends]
        for s, k in zip(ends, got, strict=True):
            if k < 2:
                raise InputError(
                    f"{self.spec.pool}: {k} run{'s' if k != 1 else ''} of "
                    f"{'good' if s == ends[0] else 'bad'} {s[:12]}; bisect needs >= 2 a commit",
                    "capture the ends into the pool (capture --repeat N --commit ...), "
                    "or give the workload command to capture the rest here",
                )
        return got

    def runs_at(self, sha: str, n: int, against: tuple[str, str] | None = None) -> str:
        """Up to n runs at sha: "ok"; "skipped" (recorded) when its workload fails;
        "exhausted" when the pool has fewer and no workload is given to capture the rest;
        "short" when a run failed at a commit that has finished runs. Without a pool and with
        `against` (the like-good and like-bad ends a step compares it with), sha's runs are
        captured interleaved with fresh runs of each (`fresh_count`: X X A B X X,
        OUTDIR/step-<sha12>/): each comparison then has runs of its end captured beside sha's,
        not only minutes before (issue 31)."""
        if sha in self.state["skipped"]:
            return "skipped"
        k = self._pooled(sha, n)
        if k >= n:
            return "ok"
        if not self.live:
            return "exhausted"
        if self.pool is None and against is not None:
            self.stepped.append(sha)
            lo, hi = against
            f = fresh_count(n)
            r = self._capture(self.step_dir(sha), [lo, sha, hi], n, [f, n, f])
        else:
            r = self._capture(self.folder(sha), [sha], n - k)
        if r.exit_code and self.n_runs(sha) > 0:
            # it ran before: a failed run (an nsys error under load, seen at a culprit's 4th run)
            # is not a commit that does not run; the step decides on the runs it has, or not
            self.short[sha] = r.problem or "a run failed"
            self.say(f"{sha[:12]}: a run failed ({self.n_runs(sha)} finished): {r.problem}")
            return "short"
        if r.exit_code:
            self.state["skipped"][sha] = r.problem
            self.save()
            self.say(f"{sha[:12]}: skipped (does not run): {r.problem}")
            return "skipped"
        return "ok"

    def evidence(self, sha: str) -> list[Any]:
        """Every run of sha a step may use: its own run set and the fresh runs of it captured
        interleaved with the steps taken so far (`stepped`, in order: a resumed call recomputes
        each step on the runs that step had)."""
        folders = [self.folder(sha)] + [
            f
            for f in dict.fromkeys(self.step_dir(x) / sha[:12] for x in self.stepped)
            if f != self.folder(sha) and runs_in(f)
        ]
        return [r for f in folders for r in self.runs_of(f)]

    def run_seconds(self, shas: list[str]) -> float | None:
        """The mean start-to-end time of the finished runs of shas' own run sets (None: none)."""
        from datetime import datetime

        took = []
        for sha in shas:
            folder = self.folder(sha)
            if not (folder / rs.INDEX).is_file():
                continue
            for e in rs.read_index(folder)["runs"]:
                if e.get("status") == "ok" and e.get("start_utc") and e.get("end_utc"):
                    a, z = (datetime.fromisoformat(e[k]) for k in ("start_utc", "end_utc"))
                    took.append((z - a).total_seconds())
        return sum(took) / len(took) if took else None

    def n_runs(self, sha: str) -> int:
        """Finished runs of sha in OUTDIR (taken from the pool or captured)."""
        return runs_in(self.folder(sha))

    def _progress(self, msg: str) -> None:
        m = re.search(r"run (\d+/\d+) \(([0-9a-f]{12})\): profiling", msg)
        if m:
            self.say(f"  {m.group(2)} run {m.group(1)}")
        elif msg.startswith("resuming"):
            self.say(f"  {msg}")
        elif ": retrying once: " in msg:  # capture's own retry of nsys (capture.runner.nsys_lost)
            self.say(f"  {msg.split(': ', 1)[1]}")

    def runs_of(self, folder: Path) -> list[Any]:
        """The loaded runs of a run set (kept while it does not grow: ends are compared at
        every step)."""
        from tracediff.parse import identity, load
        from tracediff.parse.grouping import check_run_set, run_name

        paths = sides.list_runs(folder)
        if str(folder) in self.limits:  # an undecided share's runs, as many as its look had
            paths = paths[: self.limits[str(folder)]]
        have = self.loaded.get(str(folder))
        if have is None or have[0] != paths:
            runs = [load(p) for p in paths]
            # one workload's runs, none counted twice (parse/grouping.py; issue 30)
            check_run_set(
                [identity.of(r) for r in runs],
                [run_name(folder, p) for p in paths],
                folder,
                indexed=(folder / "runset.json").is_file(),
            )
            have = (paths, runs)
            self.loaded[str(folder)] = have
        return have[1]

    def rounds(self, c: Any, fa: Path, fb: Path) -> tuple[list[float], list[float]] | None:
        """Comparison c's run mean cycle times of run sets fa (base) and fb (head) by capture
        round (run-NN / pool-NN: round NN; NaN where that round has no run), or None when its
        runs cannot be placed (a run with no cycle, a run not named by its round)."""
        out = []
        for folder, side in ((fa, c.base), (fb, c.head)):
            paths = self.loaded.get(str(folder), ([], []))[0]
            means = list(side.run_means_ms)
            numbers = [k for k in map(round_of, paths) if k is not None]
            if len(means) != len(paths) or len(numbers) != len(paths):
                return None
            by = dict(zip(numbers, means, strict=True))
            out.append([by.get(r, math.nan) for r in range(1, max(by, default=0) + 1)])
        return out[0], out[1]

    def compare(self, a: str, b: str) -> Any:
        return self.compare_sets(self.folder(a), self.folder(b), (a[:12], b[:12]))

    def compare_sets(self, fa: Path, fb: Path, labels: tuple[str, str]) -> Any:
        return self.compare_runs(self.runs_of(fa), self.runs_of(fb), labels)

    def compare_runs(self, ra: list[Any], rb: list[Any], labels: tuple[str, str]) -> Any:
        c = compare(ra, rb, cycle=self.spec.cycle, labels=labels)
        self.means.keep(ra, c.base)
        self.means.keep(rb, c.head)
        return c

    def quick(self, ra: list[Any], rb: list[Any], labels: tuple[str, str]) -> Any:
        """compare_runs for a step's decision: where the cycle time is followed and every run's
        mean is kept (host-only runs: learnt from each run alone first), its cycle-time fields
        alone, from those means (tracediff/bisect/quick.py)."""
        follow = self.state.get("follow") or {}
        if follow.get("what") == "cycle time" and ra:
            # the rule a comparison of ra and rb would cut every run by: found on ra's first
            self.means.learn_host([*ra, *rb], ra[0], self.spec.cycle)
        ma, mb = self.means.get(ra), self.means.get(rb)
        if follow.get("what") != "cycle time" or ma is None or mb is None:
            return self.compare_runs(ra, rb, labels)
        if min(len(ma), len(mb)) < 2:
            return self.compare_runs(ra, rb, labels)
        return bq.cycle_only(ma, mb)

    def learn(self, runs: list[Any], ref: Any) -> None:
        """Keep the run means of `runs` (new runs of a step) where the cycle time is followed:
        from each run alone where they and `ref` are host-only (bisect/quick.Means.learn_host),
        else one comparison against `ref`, a run of an end (1 run a side: no across-run test to
        invert), whose cycle rule is the one the step's comparison against that end uses."""
        follow = self.state.get("follow") or {}
        if follow.get("what") != "cycle time" or self.means.get(runs) is not None:
            return
        if not self.means.learn_host(runs, ref, self.spec.cycle):
            self.compare_runs([ref], runs, (Path(ref.path).parent.name, "runs"))

    def confirm(
        self, a: str, z: str, n: int | None = None, kind: str = "confirm"
    ) -> tuple[tuple[Path, Path] | None, str | None]:
        """n (N) fresh runs of a and of z captured interleaved (A Z Z A ...) into their own run
        sets, OUTDIR/<kind>-<a12>-<z12>/<sha12>: a comparison that drift between capture times
        cannot fake ("share": an undecided share's extra runs, tracediff/bisect/rest.py). (the two
        run sets, None) when captured; (the two, the problem) when a run failed (what ran is in
        them, and counted); (None, None) without a workload command."""
        if not self.live:
            return None, None
        out = self.outdir / f"{kind}-{a[:12]}-{z[:12]}"
        r = self._capture(out, [a, z], n or self.spec.repeat)
        if r.exit_code:
            self.say(f"capturing {a[:12]} and {z[:12]} into {out.name} failed: {r.problem}")
        problem = (r.problem or "a run failed") if r.exit_code else None
        return (out / a[:12], out / z[:12]), problem

    # ---- what is followed (tracediff/bisect/follow.py) ---------------------------------------

    def follow(self, c: Any, level: float | None, paired: be.Paired | None = None) -> be.Ends:
        """What the ends' comparison found to have moved (bisect/follow.follow)."""
        return bf.follow(c, self.spec.contributor, level, paired)

    def quantities(self, c: Any, follow: dict[str, Any]) -> list[Q]:
        """The followed quantities in comparison c (bisect/follow.quantities)."""
        return bf.quantities(c, follow)


def fresh_count(n: int) -> int:
    """Fresh runs of each end of its range captured with a step's n runs (issue 31: N of one
    end made a lone culprit cost 2N + 3 x 2N = 32 captures at N = 4 against the 1.5 x 20
    allowed): a quarter each, so a step costs what N/2 of one end did; the rest of an end's
    evidence is its earlier runs (`Bisection.evidence`)."""
    return max(1, math.ceil(n / FRESH_PART))


def round_of(run: Path) -> int | None:
    """The capture round of a run file (OUTDIR/<sha12>/run-03/run.arrow: 3; pool-03 likewise:
    the pool's runs are taken in its capture order), None when its folder does not say."""
    for name in (run.parent.name, run.name):
        m = re.fullmatch(r"(?:run|pool)-(\d+)", name)
        if m:
            return int(m.group(1))
    return None


def runs_in(folder: Path) -> int:
    """Finished runs of the run set in folder (0 where there is none)."""
    return len(rs.finished_runs(folder)) if (folder / rs.INDEX).is_file() else 0
