"""pytest-xdist's module-at-a-time scheduling (`--dist loadfile`), with the serial-capture modules
kept off one worker at least.

A module of SERIAL_CAPTURES runs `tracediff bisect` or `capture` on real nsys: one capture after
another, each a chain of processes that wait on each other (nsys's launcher, its agent, the
workload's sleeps, the import), so one such module keeps ~0.65 of a core busy. Three of them at
once on the 2-core CI machine left it 60-70 % busy for minutes (cpumon, session 17). Here a worker
is handed the next module in the queue's order unless all the other workers already hold a
serial-capture module, in which case it takes the first module that is not one (and the queue's
head where none is left).
"""

from __future__ import annotations

from xdist.scheduler import LoadFileScheduling
from xdist.workermanage import WorkerController

SERIAL_CAPTURES = (
    "integration/test_bisect.py",
    "integration/test_bisect_bad_itself.py",
    "integration/test_bisect_failures.py",
    "integration/test_bisect_pools.py",
    "integration/test_bisect_resume.py",
    "integration/test_bisect_retry.py",
    "integration/test_bisect_suspects.py",
    "integration/test_calibration_captures.py",
    "integration/test_capture.py",
    "integration/test_capture_runsets.py",
    "integration/test_capture_sglang.py",
)


def serial(scope: str) -> bool:
    """Whether a module (xdist's scope: its path from the root, `tests/...`) is one of them."""
    return scope.removeprefix("tests/") in SERIAL_CAPTURES


class CaptureAwareScheduling(LoadFileScheduling):
    """LoadFileScheduling whose next module for a worker is chosen as the module doc says."""

    def _assign_work_unit(self, node: WorkerController) -> None:
        others = sum(
            any(serial(scope) and not all(done.values()) for scope, done in units.items())
            for worker, units in self.assigned_work.items()
            if worker is not node
        )
        if others >= max(1, len(self.assigned_work) - 1):
            pick = next((scope for scope in self.workqueue if not serial(scope)), None)
            if pick is not None:
                self.workqueue.move_to_end(pick, last=False)
        super()._assign_work_unit(node)
