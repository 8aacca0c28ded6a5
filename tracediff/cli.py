"""Command line: `tracediff SUBCOMMAND ...`.

Stage: the only place that prints to the terminal and chooses exit codes. Each subcommand lives
in `tracediff/commands/<name>.py` with `add_parser(subparsers)` and `run(args) -> int`; modules
are imported only when their subcommand runs, so `--help` and `info` never load textual.
Exit codes: 0 ok, 1 runtime error (bad input, failed tool), 2 usage; `compare --fail-above` uses 3 and 4;
`bisect` uses 5 (nothing to bisect).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from tracediff import __version__
from tracediff.base import settings
from tracediff.base.errors import TracediffError

# Set before anything imports polars or pyarrow: their allocators (polars' jemalloc, and
# pyarrow's bundled jemalloc instead of its default mimalloc). Big buffers come from the ordinary
# arenas (oversize_threshold:0), which reuse freed pages instead of zeroing fresh ones, and from
# one arena for every thread (narenas:1): a buffer one of polars' threads frees is reused by
# another's next one, where an arena a thread (jemalloc's default) faulted in head's gathers
# afresh beside base's freed ones (x500 .sqlite compare: CPU -5 %, peak -30 MB, session 21).
# Not on transparent huge pages (thp:always until session 24): a 2 MiB page needs a free 2 MiB
# block, and a VM that hands free memory back to its host (virtio free page reporting, as on
# the development VM, which reports free blocks of 128 KiB and up) has given those
# back, so each one is backed afresh (~2 ms a MiB), where 4 KiB pages come first from the
# small free pieces it kept. farm-bench --vs, 3 s apart (bench/README.md, session 24): x500
# .sqlite compare CPU 2.51 -> 2.14 s (sys 0.91 -> 0.53), its parse 1.70 -> 1.12 s, its run files
# 1.81 -> 1.72 s; the 5 M-kernel 8-GPU run files alike (CPU 1.01x, wall 1.02x, peak -37 MiB).
# A user's own setting wins; the names set here are listed in TRACEDIFF_SET_ALLOC so a captured
# workload does not inherit them.
# OpenBLAS on one thread (set before numpy loads it): its only work here is
# the bootstraps' products ([contributors x cycles] by [cycles x 1000] resamples, ~0.04 CPU-s
# on one thread at 6,000 cycles); with a pool of one thread per core, its idle threads spin
# between products and take the cores from polars' pool: 0.7 CPU-s more of a x500 compare,
# 1.5-3.9 s of wall for 0.04 s of work at load 5 (bench/README.md, session 15). A product's
# last bits move with the thread count; the reports settle them (report/numbers.py).
_JEMALLOC = "oversize_threshold:0,narenas:1"
ALLOCATOR_ENV = {
    "_RJEM_MALLOC_CONF": _JEMALLOC,
    "JE_ARROW_MALLOC_CONF": _JEMALLOC,
    "OPENBLAS_NUM_THREADS": "1",
}
if sys.platform == "linux":  # pyarrow's Linux wheels carry jemalloc
    ALLOCATOR_ENV["ARROW_DEFAULT_MEMORY_POOL"] = "jemalloc"


def _set_allocators() -> None:
    unset = [k for k in ALLOCATOR_ENV if k not in os.environ]
    for k in unset:
        os.environ[k] = ALLOCATOR_ENV[k]
    if unset:
        settings.mark_allocators_set(unset)


_set_allocators()

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "parse": ("tracediff.commands.parse", "read a report/trace and write a run file (.arrow)"),
    "info": ("tracediff.commands.info", "show what a run file or report holds"),
    "compare": (
        "tracediff.commands.compare",
        "align two runs cycle by cycle and attribute the difference",
    ),
    "whatif": ("tracediff.commands.whatif", "replay HEAD with chosen durations taken from BASE"),
    "export": ("tracediff.commands.export", "write run tables as a Parquet dataset"),
    "capture": ("tracediff.commands.capture", "profile a workload at a git commit under nsys"),
    "bisect": (
        "tracediff.commands.bisect",
        "find the commit(s) that made a workload slower, with what they moved",
    ),
}


MIN_ADDRESS_SPACE = 4 << 30
"""polars, Arrow and their allocators reserve ~2.5 GiB of address space at start-up, most of it
never touched; under a smaller `ulimit -v` they abort in native code, past any handler (#8)."""


def _check_address_space() -> None:
    import resource

    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    if soft != resource.RLIM_INFINITY and soft < MIN_ADDRESS_SPACE:
        raise TracediffError(
            f"address space is limited to {soft >> 20} MiB (ulimit -v); tracediff needs at least "
            f"{MIN_ADDRESS_SPACE >> 30} GiB",
            "raise it (ulimit -v unlimited); to cap memory use a cgroup limit",
        )


def did_you_mean(word: str, options: Sequence[str]) -> str:
    """`did you mean X? ` for the option or subcommand closest to a misspelt `word`, or ''."""
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f"did you mean {close[0]}? " if close else ""


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.subcommands: dict[str, argparse.ArgumentParser] = {}

    def error(self, message: str) -> None:  # type: ignore[override]
        guess = ""
        bad = re.match(r"argument COMMAND: invalid choice: '([^']*)'", message)
        if bad:
            guess = did_you_mean(bad.group(1), list(self.subcommands))
        self.exit(2, f"{self.prog}: error: {message} ({guess}see {self.prog} --help)\n")

    def options(self) -> list[str]:
        """Every option string this parser takes (--format, -o, ...)."""
        return [o for a in self._actions for o in a.option_strings]


def unrecognized(parser: argparse.ArgumentParser, extra: list[str]) -> None:
    """Exit 2 for arguments the (sub)command does not take, suggesting the closest option
    of that subcommand and pointing at its own --help."""
    flags = [x.split("=", 1)[0] for x in extra if x.startswith("-")]
    own = parser.options() if isinstance(parser, _Parser) else []
    guess = next((g for g in (did_you_mean(f, own) for f in flags) if g), "")
    parser.exit(
        2,
        f"{parser.prog}: error: unrecognized arguments: {' '.join(extra)} "
        f"({guess}see {parser.prog} --help)\n",
    )


def build_parser(only: str | None = None) -> _Parser:
    """The command line's parser; with `only` (a subcommand's name), the other subcommands
    are named with their help but their modules are not imported nor their options built
    (~15 ms of a command's start: `main` parses one command)."""
    parser = _Parser(prog="tracediff", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"tracediff {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (module, help_text) in COMMANDS.items():
        if only is not None and name != only:
            parser.subcommands[name] = sub.add_parser(name, help=help_text, description=help_text)
            continue
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name == module:
                continue  # subcommand not built in this version
            raise
        p = sub.add_parser(name, help=help_text, description=help_text)
        parser.subcommands[name] = p
        mod.add_parser(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(words[0] if words and words[0] in COMMANDS else None)
    args, extra = parser.parse_known_args(words)
    if extra:
        unrecognized(parser.subcommands.get(getattr(args, "command", None) or "", parser), extra)
    if not getattr(args, "_run", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        _check_address_space()
        return int(args._run(args) or 0)
    except TracediffError as e:
        from tracediff.base.inert import safe  # a path or name in the message is printed inert

        print(f"tracediff: error: {safe(str(e))}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("tracediff: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as e:  # a full disk, an I/O error: one line, not a traceback
        from tracediff.base.inert import safe

        where = f"{safe(str(e.filename))}: " if e.filename else "writing the output: "
        print(f"tracediff: error: {where}{e.strerror or e}", file=sys.stderr)
        return 1
    except MemoryError:
        given = [getattr(args, k, None) for k in ("report", "path", "base", "head")]
        inputs = [str(v) for v in given if v]
        print(
            f"tracediff: error: {', '.join(inputs + [''])}out of memory "
            "(the input is too large for this machine's memory)",
            file=sys.stderr,
        )
        return 1


def end(code: int) -> NoReturn:
    """End this process with `code` as the interpreter ends it (non-daemon threads joined, atexit
    handlers run: Dask's clients and clusters, temporary folders, logging; the standard streams
    flushed), without its teardown: freeing every module and object, and the collections it runs
    on the way, took ~0.08 CPU-s at the end of a x500 compare (perf at 4 kHz: 323 samples of
    gc_collect_main, 16 after; the demo compare's CPU did not move). A stream that cannot be
    flushed: status 120, as the interpreter gives, but a closed pipe (`| head`), which `main`
    already takes as success."""
    import atexit
    import threading

    try:
        threading._shutdown()  # type: ignore[attr-defined]  # what the interpreter calls first
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except BrokenPipeError:
                pass
            except (OSError, ValueError) as e:
                if stream is sys.stdout and not code:  # else its error was said
                    try:
                        print(f"tracediff: error: writing the output: {e}", file=sys.stderr)
                        sys.stderr.flush()
                    except (OSError, ValueError):
                        pass
                code = code or 120
        os._exit(code)


def run() -> NoReturn:
    """The `tracediff` command (pyproject's script and `python -m tracediff`)."""
    end(main())


if __name__ == "__main__":
    run()
