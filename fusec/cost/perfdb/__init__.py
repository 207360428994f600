"""The performance database: measured routine times per GPU (paper §4.2).

``probes`` names what is timed and generates the kernels that time it,
``build`` runs them on the GPU (``fusec perfdb build``), ``store`` reads and
writes ``perfdb/<gpu>.json``, and ``predictor`` predicts kernels from it.
:func:`predictor_for` is what the rest of fusec asks for a predictor: the
database of the target GPU when one matches the library (with the correction
fitted to it, :mod:`fusec.cost.correction`, where one lies beside it), else the
analytic model with a warning.
"""

from __future__ import annotations

import functools
import warnings
from pathlib import Path

from ...library.model import Library
from ...target import chosen_slug, resolve
from ..analytic import AnalyticPredictor
from ..correction import corrected as with_correction
from ..model import Predictor
from . import store


def predictor_for(library: Library, gpu: str | None = None, *, corrected: bool = True) -> Predictor:
    """The predictor for ``library`` on the chosen GPU (``gpu``, else $FUSEC_GPU, else
    the GPU present): its performance database's, else the analytic model over the
    GPU's figures (:func:`fusec.target.resolve`; an unknown name is an ArgumentError).
    The database's prices are corrected by the fit beside it, where there is one,
    unless ``corrected`` is false (or $FUSEC_CORRECTION=0)."""
    wanted = chosen_slug(gpu)
    if wanted is None:
        warnings.warn(store.PerfdbWarning(
            "no GPU here and none named (--gpu NAME or $FUSEC_GPU): kernels are chosen by the"
            " analytic model"))
        return AnalyticPredictor(target=resolve(gpu))
    path = store.find(wanted)
    if path is None:
        target = resolve(gpu)  # a GPU fusec does not know is an error, not a warning and then one
        warnings.warn(store.PerfdbWarning(
            f"no performance database for GPU {wanted!r} in {store.directory()}: kernels are chosen"
            " by the analytic model (run 'fusec perfdb build' on that GPU)"))
        return AnalyticPredictor(target=target)
    predictor = _load(path, path.stat().st_mtime_ns, library)
    if predictor is None:
        return AnalyticPredictor(target=resolve(gpu))
    return with_correction(predictor) if corrected else predictor


@functools.lru_cache(maxsize=8)
def _load(path: Path, mtime: int, library: Library):
    from .model import PerfdbPredictor
    database = store.load(path, library)
    return PerfdbPredictor(database, library) if database is not None else None
