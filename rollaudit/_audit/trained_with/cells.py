"""How each fitted scheme does on each cell of a partition of the recorded rows: what :mod:`.parts` splits a run
by where no one scheme fits it all."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np


class CellFits(NamedTuple):
    """How each fitted scheme does on each cell (a step, an environment, or both). Only the cells holding recorded
    rows are kept: ``cells`` their codes (ascending), ``rows`` their recorded rows; per scheme string, in the
    order the schemes were given: ``misses`` (rows beyond the allowed error), ``error_sum`` (finite errors
    summed) and ``max_error`` (inf where one side is NaN)."""

    cells: np.ndarray
    rows: np.ndarray
    misses: dict[str, np.ndarray]
    error_sum: dict[str, np.ndarray]
    max_error: dict[str, np.ndarray]
    tiers: Mapping[str, int] = {}
    """How schemes that fit as well rank (:func:`~.fit.preset_tiers`)."""


class Cells:
    """The recorded rows sorted by cell once, so that each scheme's errors reduce per cell in one vector pass."""

    def __init__(self, codes: np.ndarray, tiers: Mapping[str, int]) -> None:
        self.order = np.argsort(codes, kind="stable")
        ordered = codes[self.order]
        self.starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if len(ordered) else np.zeros(0, int)
        self.cells = ordered[self.starts] if len(ordered) else np.zeros(0, np.int64)
        self.rows = np.diff(np.r_[self.starts, len(ordered)])
        self.fits = CellFits(self.cells, self.rows, {}, {}, {}, tiers)

    def add(self, name: str, errors: np.ndarray, allowed: np.ndarray) -> None:
        if not len(self.starts):
            empty = np.zeros(0)
            self.fits.misses[name], self.fits.error_sum[name], self.fits.max_error[name] = empty, empty, empty
            return
        ordered = errors[self.order]
        self.fits.misses[name] = np.add.reduceat((ordered > allowed[self.order]).astype(np.int64), self.starts)
        self.fits.error_sum[name] = np.add.reduceat(np.where(np.isfinite(ordered), ordered, 0.0), self.starts)
        self.fits.max_error[name] = np.maximum.reduceat(ordered, self.starts)
