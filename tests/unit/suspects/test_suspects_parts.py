"""The parts of commit suspects (tracediff/suspects): the one-call git log reader, the function
finder, the carrying of lines through hunks, and frame-path mapping. Real git repositories."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.support import suspects_repo as sr
from tracediff.suspects import gitlog, linemap, pysource
from tracediff.suspects.rank import map_paths

pytestmark = [pytest.mark.git]

SRC = b'''import x


class A:
    @dec
    @dec2(
        1)
    def f(self,
          a,
    ):
        s = """
text at column 0 inside the function
"""
        if a:
            g(1)
        else:
            h(
                2)
        return s

    class B:
        def f(self):
            return k()


def f():
    try:
        pass
    except E:
        k()
'''


def test_functions_are_found_by_first_line_and_qualified_name() -> None:
    s = pysource.parse(SRC)
    f = s.find("f", 5)  # Kineto's line: the first decorator's
    assert f is not None and (f.qualname, f.first, f.def_line, f.last) == ("A.f", 5, 8, 19)
    assert f.calls["g"] == [(15, 15)] and f.calls["h"] == [(17, 18)]
    assert f.branches == [(15, 15), (17, 18)]  # the if body, the else body
    b = s.find("f", 22)
    assert b is not None and (b.qualname, b.last) == ("A.B.f", 23)
    top = s.find("f", 26)
    assert top is not None and top.qualname == "f" and top.calls == {"k": [(30, 30)]}
    assert s.find("f", None) is None  # three of that name: no guess
    assert s.find("f", 16) is f  # a line inside: the innermost function holding it
    assert pysource.callee_name("<built-in method arange of type object>") == "arange"
    assert pysource.callee_name("<built-in function gelu>") == "gelu"
    assert pysource.callee_name("nn.Module: Linear_0") is None


def test_carried_lines_land_where_the_function_is_at_the_next_commit(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    sr.git(repo, "init", "-q", "-b", "main")
    body = [f"def f{i}():\n    a = {i}\n    return a\n\n" for i in range(40)]
    (repo / "m.py").write_text("".join(body))
    sr.git(repo, "add", "-A")
    sr.git(repo, "commit", "-q", "-m", "base")
    base = sr.git(repo, "rev-parse", "HEAD")
    rng = random.Random(7)
    for n in range(6):  # insertions, deletions and rewrites of whole functions elsewhere
        lines = (repo / "m.py").read_text().split("\n")
        for _ in range(4):
            j = rng.randrange(len(lines) - 1)
            if lines[j].startswith("def f1"):  # f1x functions stay whole
                continue
            op = rng.choice(["ins", "del", "sub"])
            if op == "ins":
                lines[j:j] = ["# added", "x = 1"]
            elif op == "del" and not lines[j].startswith("def "):
                del lines[j]
            else:
                lines[j] = lines[j] + "  # changed"
        (repo / "m.py").write_text("\n".join(lines))
        sr.git(repo, "commit", "-q", "-am", f"c{n}", stamp=n + 1)
    head = sr.git(repo, "rev-parse", "HEAD")
    commits = gitlog.log(repo, base, head)
    assert [c.subject for c in commits] == [f"c{n}" for n in range(6)]
    data = gitlog.blobs(repo, [f"{base}:m.py", f"{head}:m.py"])
    at_b, at_h = pysource.parse(data[f"{base}:m.py"]), pysource.parse(data[f"{head}:m.py"])
    checked = 0
    for i in range(10, 20):
        fb, fh = at_b.find(f"f{i}", None), at_h.find(f"f{i}", None)
        assert fb is not None and fh is not None
        span = [(fb.first, fb.last)]
        for c in commits:
            if "m.py" in c.files:
                span = linemap.carry(span, c.files["m.py"].hunks, True)
        back = [(fh.first, fh.last)]
        for c in reversed(commits):
            if "m.py" in c.files:
                back = linemap.carry(back, c.files["m.py"].hunks, False)
        # whole functions nobody edited: exactly where they are at the other end
        if span[0][1] - span[0][0] == fb.last - fb.first:
            assert span == [(fh.first, fh.last)], i
            assert back == [(fb.first, fb.last)], i
            checked += 1
    assert checked >= 8


def test_frame_paths_map_onto_repo_paths_by_suffix() -> None:
    repo = {"python/sglang/srt/a.py", "minispec/layers.py", "x/layers.py", "bench.py", "u/v.py"}
    got = map_paths(
        [
            "/sgl-workspace/sglang/python/sglang/srt/a.py",  # absolute, longer
            "minispec/layers.py",  # relative to the repo root
            "/tmp/wt/bench.py",
            "layers.py",  # two repo files fit equally: left out
            "v.py",  # relative to a subfolder (cwd u/)
            "torch/nn/functional.py",  # not in the repo
        ],
        repo,
    )
    assert got == {
        "/sgl-workspace/sglang/python/sglang/srt/a.py": "python/sglang/srt/a.py",
        "minispec/layers.py": "minispec/layers.py",
        "/tmp/wt/bench.py": "bench.py",
        "v.py": "u/v.py",
    }


def test_a_frame_label_keeps_line_and_function_and_cuts_the_path_from_the_left() -> None:
    from tracediff.report.text import frame_label

    long = "/sgl-workspace/sglang/python/sglang/srt/layers/quantization/unquant.py"
    got = frame_label(long, 136, "apply", 34)
    assert len(got) <= 34 and got.startswith("…") and got.endswith("unquant.py:136 apply")
    assert frame_label("minispec/layers.py", 18, "mlp", 34) == "minispec/layers.py:18 mlp"
    assert frame_label(None, None, "<built-in function gelu>", 34) == "<built-in function gelu>"
