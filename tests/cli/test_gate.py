"""`compare --fail-above PCT`: the CI gate's rule (tracediff/engine/statistics/gate.py) on real pairs.

Exit 3 on the real regressions bundled (slow-verify runs verify's MLP twice), 0 on pairs whose
only code change is a small copy while launch timing swings the cycle (the k, g and specloop
bad pairs: one said "+25.6 %" and exited 3 before), 4 with a reason when it cannot decide.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import cli_run

ROOT = Path(__file__).resolve().parents[2]
S = "samples"


def gate(*argv: str) -> tuple[int, str]:
    proc = cli_run(["compare", *argv, "--format", "json"], cwd=ROOT, timeout=300)
    return proc.returncode, proc.stderr


@pytest.mark.parametrize(
    "base,head,code",
    [
        (f"{S}/specloop_good.arrow", f"{S}/specloop_slow_verify.arrow", 3),
        (f"{S}/runs/good", f"{S}/runs/slow-verify", 3),
        (f"{S}/specloop_good.arrow", f"{S}/specloop_bad.arrow", 0),
        (f"{S}/g_good.arrow", f"{S}/g_bad.arrow", 0),
        ("tests/data/h200/k_good.json.gz", "tests/data/h200/k_bad.json.gz", 0),
        (f"{S}/runs/good", f"{S}/runs/bad", 0),
        (f"{S}/runs/good", f"{S}/runs/good", 0),
    ],
)
def test_gate_trips_on_real_regressions_only(base: str, head: str, code: int) -> None:
    rc, err = gate(base, head, "--fail-above", "5")
    assert rc == code, err
    line = [ln for ln in err.splitlines() if ln.startswith("tracediff: gate: ")]
    assert len(line) == 1 and ("fail" if code == 3 else "pass") in line[0]


def test_gate_cannot_decide_says_why_with_its_own_exit_code() -> None:
    rc, err = gate(
        f"{S}/specloop_good.arrow",
        f"{S}/specloop_slow_verify.arrow",
        "--cycle",
        "whole",
        "--fail-above",
        "5",
    )
    assert rc == 4 and "gate: undecided: no confidence interval" in err
    rc, err = gate(
        f"{S}/runs/good/run-01/run.arrow", f"{S}/runs/good/run-02/run.arrow", "--fail-above", "5"
    )
    assert rc in (0, 3)  # one run a side still decides on GPU work


def test_gate_refuses_a_percentage_that_is_not_one() -> None:
    for bad in ("nan", "inf", "-1"):
        rc, err = gate(f"{S}/g_good.arrow", f"{S}/g_bad.arrow", "--fail-above", bad)
        assert rc == 2 and "give a percentage" in err


def test_three_runs_a_side_is_undecided(tmp_path: Path) -> None:
    """3 vs 3 runs cannot reach 5 % across runs: exit 4, not a pass."""
    import shutil

    for side in ("good", "slow-verify"):
        for r in ("run-01", "run-02", "run-03"):
            shutil.copytree(ROOT / S / "runs" / side / r, tmp_path / side / r)
    rc, err = gate(str(tmp_path / "good"), str(tmp_path / "slow-verify"), "--fail-above", "5")
    assert rc == 4 and "3 vs 3 runs cannot reach 5 %" in err
