"""Fixtures shared by the integration tests (defined in tests/support/)."""

from tests.support.capture import repo  # noqa: F401  (a module's two-commit workload repository)
from tests.support.dask import cluster  # noqa: F401  (a real scheduler and two workers)
