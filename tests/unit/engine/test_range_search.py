"""The range found automatically (engine/cycle/ranges.py): `_found`, which assigns a candidate's
ops only where its score could still beat the best so far, chooses what `best` chooses from
every candidate's full coverage, with the chosen one's assignment, in any candidate order.

Real runs: the bundled H200 pair (ranges `cycle` > `draft`, `verify`: the outer one launches
every op, the inner ones part), the candidates in name order and reversed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracediff.engine.cycle import launch
from tracediff.engine.cycle import ranges as rg
from tracediff.engine.ops import gpu_ops_counted
from tracediff.parse import load

SAMPLES = Path(__file__).resolve().parents[3] / "samples"


@pytest.mark.parametrize("name", ["g_good.arrow", "g_bad.arrow"])
@pytest.mark.parametrize("reverse", [False, True])
def test_found_chooses_as_best_in_any_order(name: str, reverse: bool) -> None:
    run = load(SAMPLES / name)
    ops, _ = gpu_ops_counted(run)
    cands = rg.candidates(rg.read_ranges(run))
    assert len(cands) >= 3  # cycle, draft, verify: more than one to choose from
    if reverse:
        cands = cands[::-1]
    covered = [rg.coverage(ops, c[2]) for c in cands]
    assert len(set(covered)) > 1  # the candidates differ in what they launch
    want = rg.best(cands, covered, ops.height)
    found = rg._found(ops, cands)
    assert want is not None and found is not None
    i, assigned = found
    assert i == want
    assert assigned.equals(launch.assign(ops, cands[i][2]))
