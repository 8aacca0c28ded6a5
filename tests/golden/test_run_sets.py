"""Run sets: several runs a side, the run as the statistical unit (issue 22).

Real: the bundled H200 run sets (samples/runs: specloop good / bad / slow-verify, 4 runs each,
captured interleaved with `tracediff capture --repeat 4 --variants ...`). Generated: nsys-schema
reports (tests/support/gen_nsys.py) where every run (process) carries its own host stall, the run-to-run
offset that one-run-a-side statistics cannot see.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.support.gen_nsys import HostGap, write_report
from tracediff.engine.compare import compare
from tracediff.parse import load
from tracediff.parse.sides import resolve
from tracediff.report import render

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "samples" / "runs"


def side(name: str) -> list:  # type: ignore[type-arg]
    return [load(p) for p in resolve(RUNS / name).runs]


@pytest.fixture(scope="module")
def good_bad():  # type: ignore[no-untyped-def]
    return compare(side("good"), side("bad"), n_boot=200, labels=("good", "bad"))


def test_the_added_copy_is_real_and_the_draft_swing_is_noise(good_bad) -> None:  # type: ignore[no-untyped-def]
    """`bad` adds a device copy per all-reduce in verify: found in every run, significant across
    runs. The cycle time, moved by host-bound idle in the launch-bound draft phase (whose run
    means swing by ~2.5 ms between processes of one variant), is not significant."""
    c = good_bad
    assert (c.base.runs, c.head.runs) == (4, 4) and c.noise_unit == "run"
    assert c.p_value is not None and c.p_value > 0.05 and not c.significant
    assert max(c.base.run_means_ms) - min(c.base.run_means_ms) > 1.0  # the swing is there
    att = c.attribution
    copy = att.filter((att["name"] == "Memcpy DtoD") & (att["phase"] == "verify")).row(
        0, named=True
    )
    assert copy["significant"] and copy["consistent"] and copy["delta_ms_per_cycle"] > 0.02
    assert copy["base_runs"] == 4 and copy["head_runs"] == 4
    draft = att.filter(
        (att["kind"] == "gap") & (att["phase"] == "draft") & (att["status"] == "host-side")
    ).row(0, named=True)
    assert not draft["significant"] and draft["ci95_low"] < 0 < draft["ci95_high"]
    # the same pair one run a side calls the cycle time significant (run 1 vs run 1)
    one = compare(side("good")[0], side("bad")[0], n_boot=200)
    assert one.noise_unit == "cycle" and one.significant


def test_a_run_set_against_itself_is_not_significant() -> None:
    c = compare(side("good"), side("good"), n_boot=200)
    assert c.p_value == 1.0 and not c.significant
    assert not c.attribution["significant"].any()


def test_json_carries_runs_and_the_across_run_decision(good_bad) -> None:  # type: ignore[no-untyped-def]
    d = json.loads(render(good_bad, "json"))
    assert d["runs"] == {"base": 4, "head": 4} and d["noise_unit"] == "run"
    assert d["delta_ms_per_cycle"]["significant"] is False
    assert 0.05 < d["delta_ms_per_cycle"]["p_value"] <= 1
    assert len(d["base"]["run_means_ms"]) == 4 and d["base"]["run_labels"] == ["good"] * 4
    row = next(r for r in d["attribution"] if r["name"] == "Memcpy DtoD")
    assert row["consistent"] is True and row["head_runs"] == 4


def test_table_says_runs_and_what_the_statistics_are_over(good_bad) -> None:  # type: ignore[no-untyped-def]
    text = render(good_bad, "table", 5)
    assert "runs (mean ms per cycle of each): base 4 runs [" in text
    assert "not significant across runs" in text
    assert "one run a side" not in text


def test_three_runs_a_side_cannot_decide_and_says_so() -> None:
    """3 vs 3 runs: an exact test's smallest p-value is 0.1: undecided, never 'significant'."""
    c = compare(side("good")[:3], side("slow-verify")[:3], n_boot=200)
    assert not c.significant and c.p_value is not None and c.p_value >= 0.1
    text = render(c, "table", 5)
    assert "too few runs" in text
    assert any("cannot reach 5 %" in w for w in c.warnings)


def _generated_runs(tmp: Path, tag: str, n: int, seed0: int, shift_ns: int) -> list:  # type: ignore[type-arg]
    """n runs of one generated workload: each run's own host stall U(0, 300 us) before op 10
    (a per-process offset), plus `shift_ns` more before op 20 in every cycle."""
    runs = []
    for i in range(n):
        rng = np.random.default_rng([seed0, i])
        changes = [HostGap(before_op=10, gap_ns=int(rng.uniform(0, 300_000)))]
        if shift_ns:
            changes.append(HostGap(before_op=20, gap_ns=shift_ns))
        path = tmp / f"{tag}_{i}.sqlite"
        write_report(path, n_cycles=20, kernels_per_cycle=30, changes=changes, seed=seed0 * 100 + i)
        runs.append(load(path))
    return runs


def test_generated_runs_with_per_process_offsets(tmp_path: Path) -> None:
    """Same configuration, 5 vs 5 runs, six different draws: none significant across runs, while
    one run a side calls most such pairs significant (the offset is invisible to it). A shift of
    ~2.9x the between-run spread (250 us; the SD of U(0, 300 us) is 87 us): significant."""
    same, one_run = 0, 0
    for k in range(6):
        a = _generated_runs(tmp_path, f"a{k}", 5, 10 + k, 0)
        b = _generated_runs(tmp_path, f"b{k}", 5, 50 + k, 0)
        same += compare(a, b, n_boot=200).significant
        one_run += compare(a[0], b[0], n_boot=200).significant
    assert same == 0
    assert one_run >= 4
    a = _generated_runs(tmp_path, "sa", 5, 90, 0)
    b = _generated_runs(tmp_path, "sb", 5, 91, 250_000)
    c = compare(a, b, n_boot=200)
    assert c.significant and c.noise_unit == "run"
    assert 0.1 < c.delta_ms_per_cycle < 0.45
