"""The rank file as the unit (engine/pipeline/rankunit.py), in this process: the same comparison as the
joined run's, whether base's first run finds its cycle range from its scans' counts or from a
round of its own (`PROBE_KEYS` below every file's range names), on HTA's two-rank job and on a
generated 2-node x 2-GPU job of per-rank Kineto traces with a straggler (each node its clock).
The rounds run through rankunit.local_map, as a cluster runs them file by file."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest

from tests.support.gen_kineto_nodes import write_kineto_nodes
from tests.support.gen_nsys import Straggler, write_report
from tracediff.engine.compare import compare
from tracediff.engine.inputs import load_sides
from tracediff.engine.pipeline import rankmerge, rankunit
from tracediff.engine.pipeline.rankrun import RankRun
from tracediff.report import render

KINETO = Path(__file__).resolve().parent.parents[1] / "data" / "kineto"


class Here:
    """Round 1 (the scans) in this process, as engine/pipeline/cluster.py's `scan` on the workers."""

    def scan(self, items: list[tuple[str, bool]], sides: list[str], say: object) -> list[object]:
        return rankunit.local_map(rankunit.scan, items, sides, "read")


def _json(base: Path, head: Path, layout: str, cluster: object) -> str:
    sides = load_sides(
        base, head, layout, lambda _m: None, None, cluster, allow_missing_ranks=True
    )  # HTA's job: 2 of its 128 ranks
    runs = sides.bases + sides.heads
    assert all(isinstance(r, RankRun) for r in runs) == (cluster is not None)
    res = compare(sides.bases, sides.heads, n_boot=100, labels=sides.labels)
    return render(replace(res, device_map=sides.device_match.rows()), "json", 10)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Path, Path, str]]:
    d = tmp_path_factory.mktemp("rank-unit")
    for side in ("base", "head"):
        (d / "hta" / side).mkdir(parents=True)
        for r in (0, 1):
            shutil.copy(KINETO / f"sampled_rank-{r}.json.gz", d / "hta" / side)
    for side, seed, changes, err in (
        ("b", 1, [], 3_000_000),
        ("h", 2, [Straggler(3, 20_000)], -2_000_000),
    ):
        t = write_report(d / f"{side}.sqlite", 4, 12, 20, changes, seed=seed)
        write_kineto_nodes(t.path, d / f"k{side}", 2, [0, err])
    return [(d / "hta" / "base", d / "hta" / "head", "auto"), (d / "kb", d / "kh", "ranks")]


@pytest.mark.parametrize("probe_round", [False, True])
def test_the_rank_unit_compares_as_the_joined_run(
    jobs: list[tuple[Path, Path, str]], probe_round: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    probes = []
    sub = rankunit.reduce_sub

    def counted(s: rankunit.Sub) -> object:
        probes.append(s.mode == "probe")
        return sub(s)

    monkeypatch.setattr(rankunit, "reduce_sub", counted)
    if probe_round:
        monkeypatch.setattr(rankunit, "PROBE_KEYS", -1)
    for base, head, layout in jobs:
        probes.clear()
        assert _json(base, head, layout, Here()) == _json(base, head, layout, None), base
        n_base = len(list(base.iterdir()))
        assert sum(probes) == (n_base if probe_round else 0)


def test_the_driver_keeps_only_the_rows_a_critical_gpu_can_have(
    jobs: list[tuple[Path, Path, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """engine/pipeline/rankmerge.py: a file's `long` rows of a device that cannot finish a cycle last are
    dropped as the file comes back (here re-pruned on every arrival: REPRUNE 1), the run keeps
    one device's rows per cycle (the leaders followed as the files came back are the leaders of
    the run's cycles), and the comparison is still the joined run's."""
    monkeypatch.setattr(rankmerge, "REPRUNE", 1)
    came, kept, merged = [], [], []
    arrived, merge = rankmerge.Leaders.arrived, rankmerge.merge

    def counted(self: rankmerge.Leaders, i: int, part: object) -> object:
        came.append(getattr(part, "long", pl.DataFrame()).height)
        out = arrived(self, i, part)
        kept.append(getattr(out, "long", pl.DataFrame()).height)
        return out

    def merged_run(*a: object) -> object:
        out = merge(*a)  # type: ignore[arg-type]
        merged.append((out, a[3]))
        return out

    monkeypatch.setattr(rankmerge.Leaders, "arrived", counted)
    monkeypatch.setattr(rankmerge, "merge", merged_run)
    base, head, layout = jobs[1]  # 2 nodes x 2 GPUs a side, one file per GPU
    assert _json(base, head, layout, Here()) == _json(base, head, layout, None)
    assert len(came) == 8 and sum(kept) < sum(came)
    for run, lead in merged:
        assert lead is not None and lead.equals(rankmerge.leading(run.cyc))
        per_cycle = run.long.group_by("cycle").agg(pl.col("device_id").n_unique())
        assert per_cycle["device_id"].max() == 1
        assert set(run.long["cycle"].unique()) == set(run.cyc["cycle"].unique())
