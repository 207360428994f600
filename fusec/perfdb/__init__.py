"""The performance database: measured routine times per GPU (paper §4.2).

``predictor_for`` is what the rest of fusec asks for a predictor: the
database of the target GPU when one matches the library, else the analytic
model with a warning.
"""

from __future__ import annotations

from ..predict import DEFAULT, Predictor


def predictor_for(library, gpu: str | None = None) -> Predictor:
    """The predictor for ``library`` on the target GPU (see :func:`fusec.gpu.target`)."""
    return DEFAULT  # filled in by the perfdb predictor (issue 4)
