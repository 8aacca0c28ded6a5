"""`tracediff bisect`'s search order: the commit suspects first, within the binary search's bound.

Stage: bisect (called by tracediff/bisect/search.py). Input: the ends' comparison (its launch
stacks and attribution) and the range; output: an `Order` (what the JSON's `search_order`,
`search_order_why` and `suspects` say) and, step by step, which commit to capture next.

Plan, once the ends are captured and the regression confirmed: rank the first-parent commits of
GOOD..BAD by how much of the ends' change runs through the code they touched (the commit
suspects of `compare --repo`, tracediff/suspects/rank.py: launch stacks of GPU ops, or of host
phases from nsys function-trace ranges, engine/host_stacks.py). When the top suspect scores at
least MARGIN times the next one (or is the only one), the search is ordered by it
(`search_order: "suspects"`); without stacks, with no suspect, with no clear margin or with
`--no-suspects`, it is the plain binary search (`"binary"`), and `search_order_why` says why.

Order, in the search over the whole range (the ranges searched beside a culprit later are
binary). Every probe keeps the issue-18 bound: with k decided steps left of ceil(log2(commits)),
a commit X between the last like-good L and the first like-bad H is probed only when both
outcomes leave a range binary search finishes in k - 1 steps (X - L <= 2^(k-1) and
H - X <= 2^(k-1)). Among those, the one after which the search would end soonest were the
suspect S the first bad commit (`_fastest`, exact): mostly S and its parent S-1 (a right suspect
is then found in 2 steps), else a commit that narrows the range round S
(`chosen_by` in the step log: "suspect" for S or S-1, "toward suspect"). Once a step puts S
outside (L, H] (S like good, or S-1 like bad) the suspect was wrong, and the rest is the binary
search's middle. So a wrong suspect costs nothing beyond the bound, and a right one saves steps
where the bound leaves room. Counted over every range of 2-40 commits and every position of a
right suspect: 2255 decided steps against binary search's 3831, never one more than binary at
any position, never above the bound for any suspect (tests/unit/bisect/test_bisect_order.py checks
that to 16 commits). In 7 commits (bound 3) a right suspect at 3, 5 or 7 takes 2 steps instead
of 3; at 2, 4 or 6 the bound leaves no room (3, as binary); 8 commits leave none anywhere.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

from tracediff.base.errors import TracediffError

MARGIN = 2.0
"""The top suspect leads when its score is at least this many times the next one's (on the real
H200 pair: culprit 1.027, caller 0.384, i.e. 2.7x)."""
SHOWN = 5
"""Suspects kept in the result (the JSON's `suspects`)."""


@dataclass
class Order:
    mode: str  # "suspects" | "binary"
    why: str
    suspect: int | None = None  # index into Bisection.commits
    rows: list[dict[str, Any]] = field(default_factory=list)

    def json(self) -> dict[str, Any]:
        return {"search_order": self.mode, "search_order_why": self.why, "suspects": self.rows}


def plan(b: Any, c0: Any, enabled: bool) -> Order:
    """The search order for bisection `b` (tracediff/bisect/bisection.py's Bisection) from the ends'
    comparison c0."""
    if not enabled:
        return Order("binary", "turned off (--no-suspects)")
    if not c0.launch_stacks.height:
        return Order(
            "binary",
            "the ends' runs carry no launch stacks (tracediff capture records them for the "
            "workload's own packages: nsys function trace; Kineto with_stack)",
        )
    from tracediff.suspects.rank import rank

    good, bad = b.commits[0], b.commits[-1]
    try:
        s = rank(c0.launch_stacks, c0.attribution, b.repo, good, bad, "bisect ends")
    except TracediffError as e:
        return Order("binary", f"no suspects: {e.message}")
    rows = [
        {
            "commit": r["commit"],
            "subject": r["subject"],
            "score": r["score"],
            "share": r["share"],
            "functions": r["functions"],
        }
        for r in s.rows[:SHOWN]
    ]
    if not rows:
        return Order("binary", "no suspects: " + ("; ".join(s.notes) or "none"))
    top = rows[0]
    nxt = rows[1]["score"] if len(rows) > 1 else 0.0
    if top["commit"] not in b.commits[1:]:  # rank reads the same first-parent range
        return Order(
            "binary", f"the top suspect {top['commit'][:12]} is not in the range", None, rows
        )
    if nxt > 0 and top["score"] < MARGIN * nxt:
        return Order(
            "binary",
            f"no clear top suspect: {top['score']:.3g} vs {nxt:.3g} (needs {MARGIN:g}x)",
            None,
            rows,
        )
    lead = "the only suspect" if nxt <= 0 else f"{top['score'] / nxt:.1f}x the next"
    return Order(
        "suspects",
        f"top suspect {top['commit'][:12]} {top['subject']!r}: score {top['score']:.3g}, {lead}",
        b.commits.index(top["commit"]),
        rows,
    )


def steps_for(n: int) -> int:
    """Decided steps a binary search over n commits needs at most: ceil(log2(n))."""
    return math.ceil(math.log2(n)) if n > 1 else 0


def choose(cand: list[int], lo: int, hi: int, left: int, suspect: int | None) -> tuple[int, str]:
    """The next commit to probe among `cand` (indices strictly between lo, like good, and hi,
    like bad; not skipped) and why: "suspect" (S or S-1), "toward suspect" or "middle".
    `left`: decided steps left within the bound (ceil(log2(range)) minus those taken)."""
    middle = (lo + hi) / 2

    def mid_first(i: int) -> tuple[float, int]:
        return (abs(i - middle), i)

    binary = min(cand, key=mid_first)
    if suspect is None or not lo < suspect <= hi or left < 1:
        return binary, "middle"
    ok = [i for i in cand if _allowed(i, lo, hi, left)]
    if not ok:  # skipped commits left no probe within the bound: as binary search does
        return binary, "middle"
    if hi - lo <= DP_MAX:
        x = _fastest(ok, lo, hi, left, suspect)
    else:
        direct = [t for t in (suspect, suspect - 1) if t in ok]
        x = (
            direct[0]
            if direct
            else min(ok, key=lambda i: (abs(i - (suspect - 0.5)), *mid_first(i)))
        )
    return x, "suspect" if x in (suspect, suspect - 1) else "toward suspect"


DP_MAX = 200
"""Ranges up to this many commits get the fewest-steps probe (`_fastest`, <= 0.15 s measured);
larger ones probe S or S-1 where allowed, else the allowed commit nearest them."""


def _allowed(x: int, lo: int, hi: int, left: int) -> bool:
    """Probing x keeps the bound: either outcome leaves a range binary search finishes in
    left - 1 steps."""
    half = 1 << (left - 1)
    return x - lo <= half and hi - x <= half


def _fastest(ok: list[int], lo: int, hi: int, left: int, suspect: int) -> int:
    """The probe among `ok` after which, were the suspect the first bad commit, the search ends
    in the fewest steps, every later probe kept within the bound too (exact, by dynamic
    programming over (last good, first bad, steps left); ties: S, then S-1, then the middle).
    Probing S then S-1 is not always fastest: in 6 commits with S = 4 that takes 3 steps (S-1
    is not allowed after S), the middle 3 then 4 takes 2."""

    @functools.cache
    def cost(a: int, z: int, k: int) -> int:
        if z - a <= 1:
            return 0
        half = 1 << (k - 1) if k >= 1 else 0
        xs = range(max(a + 1, z - half), min(z - 1, a + half) + 1)
        return 1 + min(
            (cost(*((a, x) if x >= suspect else (x, z)), k - 1) for x in xs), default=10**9
        )

    middle = (lo + hi) / 2

    def key(x: int) -> tuple[int, int, float]:
        nxt = (lo, x) if x >= suspect else (x, hi)
        first = 0 if x == suspect else 1 if x == suspect - 1 else 2
        return (cost(*nxt, left - 1), first, abs(x - middle))

    return min(ok, key=key)
