"""Which files of a folder are the per-rank files of one run, read from their names.

Stage: parse (input dispatch, with sides.py). Input: file paths; output: each file's rank tokens
and the layout the names describe. Nothing here opens a file: content (Kineto
`distributedInfo`, NCCL communicator ranks) is read by the readers and weighed in gpus.py.

Names recognised (a token is a word and a number, between `-`, `_`, `.` or the ends):

- SGLang's profiler (`/start_profile`, `SGLANG_TORCH_PROFILER_DIR`): `[PREFIX-]{time}-TP-{tp}`
  then `-DP-{dp}`, `-PP-{pp}`, `-EP-{ep}` for each parallelism larger than 1, then an optional
  stage suffix, then `.trace.json.gz`: several tokens a file, one (tp, dp, pp, ep) per GPU.
- Kineto folders of PyTorch jobs (HTA, TraceLens): `rank-3.json.gz`, `rank3...`,
  `sampled_rank-1.json.gz`; `-r3-`.
- Nsight Systems per rank or node: `report_rank%q{RANK}` -> `report_rank3.nsys-rep`; `%h` host
  names are no rank token (give `--layout ranks`).

The rule (README "One run from many files"): a folder's files are one run's ranks when every
file carries rank tokens of the same kinds, the names are equal once the tokens are taken out, and
no two files have the same tokens. Files that all carry tokens but fall into several such groups
(two `/start_profile` calls in one folder, EXTEND and DECODE stages) are ambiguous and refused by
sides.py, which says what it found.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

TOKEN = re.compile(r"(?i)(?:^|[-_.])(rank|tp|dp|pp|ep|r)[-_]?(\d+)(?=$|[-_.])")

ORDER = ("rank", "pp", "dp", "tp", "ep", "r")
"""How tokens order the files: an explicit rank first; else SGLang's GPUs are numbered
pipeline-major, then data-parallel, then tensor-parallel (EP shares the TP GPUs)."""


@dataclass(frozen=True)
class RankName:
    """One file's rank tokens, e.g. {"tp": 3, "dp": 1}, and its name without them."""

    path: Path
    tokens: tuple[tuple[str, int], ...]  # sorted by ORDER
    stem: str

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.tokens)

    def label(self) -> str:
        """`TP-3-DP-1`, `rank-3`: how reports name this file's rank."""
        return "-".join(f"{k.upper() if k != 'rank' else k}-{v}" for k, v in self.tokens)


def parse_name(path: Path) -> RankName | None:
    """The rank tokens of a file name; None when it has none, or one kind twice."""
    found = [(m.group(1).lower(), int(m.group(2))) for m in TOKEN.finditer(path.name)]
    if not found or len({k for k, _ in found}) != len(found):
        return None
    tokens = tuple(sorted(found, key=lambda kv: ORDER.index(kv[0])))
    return RankName(path, tokens, TOKEN.sub("", path.name).lower())


@dataclass(frozen=True)
class Groups:
    """The files of a folder sorted by their names: `groups` of per-rank files (each the files
    of one run, in rank order), and the files with no rank token."""

    groups: tuple[tuple[RankName, ...], ...]
    plain: tuple[Path, ...]

    def describe(self) -> str:
        """What was found, for an error message: `2 groups of rank files (... 8 files TP-0..TP-7;
        ... 8 files ...), 1 file without a rank`."""
        parts = [
            f"{len(g)} files {g[0].path.name} .. {g[-1].path.name}"
            if len(g) > 1
            else f"1 file {g[0].path.name}"
            for g in self.groups
        ]
        if self.plain:
            parts.append(
                f"{len(self.plain)} file(s) without a rank token ({self.plain[0].name}"
                + (", ..." if len(self.plain) > 1 else "")
                + ")"
            )
        return "; ".join(parts)


def group(files: list[Path]) -> Groups:
    """Files grouped by (name without rank tokens, token kinds), each group in rank order."""
    by: dict[tuple[str, tuple[str, ...]], list[RankName]] = {}
    plain: list[Path] = []
    for f in files:
        n = parse_name(f)
        if n is None:
            plain.append(f)
        else:
            by.setdefault((n.stem, n.kinds), []).append(n)
    groups = tuple(tuple(sorted(g, key=lambda n: [v for _, v in n.tokens])) for g in by.values())
    return Groups(tuple(sorted(groups, key=lambda g: g[0].path.name)), tuple(plain))


def is_rank_group(names: tuple[RankName, ...]) -> bool:
    """Two or more files with distinct tokens (a group from `group`)."""
    return len(names) >= 2 and len({n.tokens for n in names}) == len(names)


def looks_like_ranks(files: list[Path]) -> bool:
    """Whether files are exactly one run's per-rank files (the rule in the module docstring)."""
    g = group(files)
    return not g.plain and len(g.groups) == 1 and is_rank_group(g.groups[0])


def rank_of_name(names: tuple[RankName, ...], i: int) -> int | None:
    """The global rank the name of file `i` of a rank group says: its `rank`/`r` token, its only
    token, else its index in (pp, dp, tp) order (SGLang numbers GPUs that way). None when names
    repeat a rank."""
    n = names[i]
    d = dict(n.tokens)
    for k in ("rank", "r"):
        if k in d:
            return d[k]
    if len(d) == 1:
        return next(iter(d.values()))
    return i if is_rank_group(names) else None


PROFILER_NAME = re.compile(
    r"^(?P<host>.+)_(?P<pid>\d+)\.(?P<time>\d{12,})\.pt\.trace\.json(?:\.gz)?$"
)
"""torch.profiler's `tensorboard_trace_handler` names: `{worker}.{time_ms}.pt.trace.json[.gz]`,
the default worker name `{socket.gethostname()}_{os.getpid()}`, time_ms since the epoch
(12+ digits: `rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz` is a custom worker name, no host)."""


def profiler_host(path: Path) -> str | None:
    """The host a Kineto trace's default `tensorboard_trace_handler` name says, else None (the
    trace itself names no host)."""
    m = PROFILER_NAME.match(path.name)
    return m.group("host") if m else None
