"""tests/support/schedule.py: the suite's own xdist scheduler keeps a worker off serial-capture
modules while the others hold one, and otherwise hands modules out in the queue's order.

Driven through xdist's real scheduling code; the workers are stand-ins that record what they are
sent (an execnet gateway per worker is what pytest-xdist itself would need)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tests.support.schedule import CaptureAwareScheduling, serial

N1, N2, N3 = (f"tests/integration/test_bisect{s}.py" for s in ("", "_retry", "_pools"))
C1, C2, C3 = (f"tests/unit/engine/test_{s}.py" for s in ("a", "b", "c"))


class _Node:
    def __init__(self, name: str) -> None:
        self.name, self.sent, self.shutting_down = name, [], False
        self.gateway = SimpleNamespace(id=name)

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent.append(indexes)

    def shutdown(self) -> None:
        self.shutting_down = True


def _scheduled(modules: list[str], workers: int) -> tuple[CaptureAwareScheduling, list[Any]]:
    config = SimpleNamespace(
        getvalue=lambda name: [f"{workers}*popen"] if name == "tx" else None,
        option=SimpleNamespace(loadscopereorder=False),
    )
    sched = CaptureAwareScheduling(config)  # type: ignore[arg-type]
    nodes = [_Node(f"gw{i}") for i in range(workers)]
    collection = [f"{m}::test_{k}" for m in modules for k in range(5)]
    for node in nodes:
        sched.add_node(node)  # type: ignore[arg-type]
        sched.add_node_collection(node, collection)  # type: ignore[arg-type]
    sched.schedule()
    return sched, nodes


def _modules(sched: CaptureAwareScheduling, node: Any) -> list[str]:
    return list(sched.assigned_work[node])


def _finish(sched: CaptureAwareScheduling, node: Any, module: str) -> None:
    """The worker reports each test of `module` done (xdist then hands it its next module)."""
    collection = sched.registered_collections[node]
    for nodeid in list(sched.assigned_work[node][module]):
        sched.mark_test_complete(node, collection.index(nodeid))


def test_the_third_worker_takes_a_cpu_module_while_two_hold_serial_captures() -> None:
    assert all(map(serial, (N1, N2, N3))) and not any(map(serial, (C1, C2, C3)))
    sched, (a, b, c) = _scheduled([N1, N2, N3, C1, C2, C3], workers=3)
    assert [_modules(sched, n) for n in (a, b, c)] == [[N1], [N2], [C1]]  # xdist's own: N3 to c
    _finish(sched, c, C1)  # a and b still hold serial captures: c takes the next CPU module
    assert _modules(sched, c) == [C1, C2]
    _finish(sched, a, N1)  # only b holds one: a takes the queue's head
    assert _modules(sched, a) == [N1, N3]
    _finish(sched, c, C2)
    assert _modules(sched, c) == [C1, C2, C3]
    _finish(sched, b, N2)  # nothing left: b is shut down
    assert b.shutting_down and [len(n.sent) for n in (a, b, c)] == [2, 1, 3]


def test_queue_order_where_no_cpu_module_is_left() -> None:
    sched, nodes = _scheduled([N1, N2, N3], workers=3)
    assert [_modules(sched, n) for n in nodes] == [[N1], [N2], [N3]]


def test_queue_order_while_another_worker_is_free_of_serial_captures() -> None:
    sched, nodes = _scheduled([C1, N1, N2, C2], workers=3)
    assert [_modules(sched, n)[0] for n in nodes] == [C1, N1, N2]
