"""The errors of distributed programs: one branch of fusec's hierarchy (FusecError)."""

from __future__ import annotations

from ..errors import FusecError


class DistributionError(FusecError):
    """A script that cannot be split over ranks: a call whose result is not a
    sum or a concatenation of the ranks' results (located at the call)."""


class CollectiveError(FusecError):
    """A collective failed, or another rank failed before it (the communicator
    is aborted: the program cannot run again)."""


class CollectiveTimeoutError(CollectiveError):
    """A collective did not finish within its timeout: another rank has failed,
    hangs, or never called it."""
