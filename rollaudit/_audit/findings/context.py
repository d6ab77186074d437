"""What every check reads: the audited rows as tensors, the run's own advantages, its scheme where known, the true
(step, prompt) groups, and a fit of any scheme's advantages to the run's, row by row."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..._errors import SchemeError
from ..._table import PROMPT, STEP
from .finding import Example
from .laws import recorded_dtype, relative_tolerance

if TYPE_CHECKING:
    import pyarrow as pa

    from ..engine.encode import Encoded
    from ..schemes import Scheme

FIT_TOLERANCE = 1e-6
"""Relative: a scheme's advantage reproduces the run's where they differ by at most this much of ``max(1, |A|)``
(or the run's dtype's rounding, where that is larger): per row, so one blown-up row loosens no other."""
EXAMPLES = 3
EXAMPLE_ROWS = 8


@dataclass
class Rows:
    """The audited rows (a validated table the framework trained, encoded) and the run's advantages on them."""

    enc: Encoded
    table: pa.Table
    advantage: torch.Tensor  # float64, NaN where the run gave none
    scheme: Scheme | None  # the preset the advantages come from, where one reproduces them or is given or assumed
    evidence: str  # recorded, given, config or framework default
    present: torch.Tensor  # the rows with an advantage to check (recorded ones: those recorded)
    full: pa.Table | None = None  # every row, the untrained ones too, where the dump has untrained rows
    row_numbers: np.ndarray | None = None  # each row's number in the table as loaded (untrained rows counted)
    prompt_groups: tuple[torch.Tensor, int] | None = None  # the audit's own (step, prompt) codes (gaps) and count
    _values: dict[Scheme, torch.Tensor | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.reward = self.enc.reward.cpu()
        # A row without an advantage of the run's is in no check: no true group, no fit.
        self.advantage = torch.where(self.present, self.advantage, torch.nan)
        self.dtype = recorded_dtype(self.advantage) if self.evidence == "recorded" else self._scheme_dtype()

    @cached_property
    def _grouped(self) -> tuple[torch.Tensor, int]:
        keys = self.enc.prompt.cpu()
        keyed = (keys >= 0) & self.present
        if self.prompt_groups is not None:
            return torch.where(keyed, self.prompt_groups[0].cpu(), -1), self.prompt_groups[1]
        pairs = self.step * (int(keys.max()) + 1 if keys.numel() else 1) + keys
        group = torch.full_like(keys, -1)
        uniques, inverse = torch.unique(pairs[keyed], return_inverse=True)
        group[keyed] = inverse
        return group, uniques.numel()

    @property
    def group(self) -> torch.Tensor:
        """Each row's true (step, prompt) group, -1 without a prompt key or an advantage to check (made on first
        use: a clean run's checks may never need it)."""
        return self._grouped[0]

    @property
    def groups(self) -> int:
        """How many group codes there are (gaps allowed)."""
        return self._grouped[1]

    @cached_property
    def group_sizes(self) -> torch.Tensor:
        keyed = self.group >= 0
        return torch.bincount(self.group[keyed], minlength=self.groups)

    @cached_property
    def keyed_everywhere(self) -> bool:
        return self.enc.table.column(PROMPT).null_count == 0

    # The encoded table's tensors the checks read, on the CPU (the audit may have run on a GPU).

    @cached_property
    def step(self) -> torch.Tensor:
        return self.enc.step.cpu()

    @cached_property
    def trajectory(self) -> torch.Tensor:
        return self.enc.trajectory.cpu()

    @cached_property
    def batch_rank(self) -> torch.Tensor:
        return self.enc.batch_rank.cpu()

    @cached_property
    def step_sizes(self) -> torch.Tensor:
        return self.enc.step_sizes.cpu()

    def _scheme_dtype(self) -> str:
        return self.scheme.dtype if self.scheme is not None else "float64"

    @property
    def rows(self) -> int:
        return int(self.enc.rows)

    def values_of(self, scheme: Scheme) -> torch.Tensor | None:
        """``scheme``'s advantages on the rows (made once), None where it cannot run on them."""
        from ..kernel import advantages

        if scheme not in self._values:  # schemes equal in arithmetic (whatever their names) share their values
            try:
                self._values[scheme] = advantages(self.enc, scheme).to(torch.float64).cpu()
            except SchemeError:
                self._values[scheme] = None
        return self._values[scheme]

    def tolerance(self, values: torch.Tensor) -> torch.Tensor:
        relative = max(FIT_TOLERANCE, relative_tolerance(self.dtype))
        return relative * values.abs().nan_to_num(0.0, 0.0, 0.0).clamp_min(1.0)

    def matches(self, values: torch.Tensor, advantage: torch.Tensor | None = None) -> torch.Tensor:
        """Per row: ``values`` reproduce the run's advantages (both NaN counts as reproduced)."""
        advantage = self.advantage if advantage is None else advantage
        both_nan = torch.isnan(values) & torch.isnan(advantage)
        return both_nan | ((values - advantage).abs() <= self.tolerance(values))

    def share(self, matched: torch.Tensor) -> float:
        """The share of the rows with an advantage that ``matched`` holds (a shorter mask: of its own rows)."""
        if matched.numel() == self.rows:
            matched = matched[self.present]
        return float(matched.to(torch.float64).mean()) if matched.numel() else 0.0

    def steps_of(self, flagged: torch.Tensor) -> tuple[int, ...]:
        if not bool(flagged.any()):
            return ()
        values = np.asarray(self.enc.step_values, dtype=np.int64)
        if self.enc.single_step:
            return (int(values[0]),)
        codes = torch.nonzero(torch.bincount(self.step[flagged], minlength=self.enc.steps)).flatten()
        return tuple(int(values[code]) for code in codes.tolist())

    def groups_of(self, flagged: torch.Tensor) -> int:
        codes = self.group[flagged]
        codes = codes[codes >= 0]
        return int((torch.bincount(codes, minlength=self.groups) > 0).sum()) if codes.numel() else 0

    def _numbered(self, rows: torch.Tensor) -> np.ndarray:
        numbers = rows.numpy()
        return numbers if self.row_numbers is None else self.row_numbers[numbers]

    def examples(self, flagged: torch.Tensor) -> tuple[Example, ...]:
        """The groups with the most flagged rows, most first (then first in row order), as (step, prompt, rows)."""
        at = torch.nonzero(flagged).flatten()
        if not at.numel():
            return ()
        codes = self.group[at]
        keyed = codes >= 0
        counts = torch.bincount(codes[keyed], minlength=max(self.groups, 1))
        order = torch.argsort(-counts, stable=True)[:EXAMPLES]
        picked = [int(code) for code in order.tolist() if int(counts[code]) > 0]
        places = [at[codes == code] for code in picked] or [at]
        steps = self.table.column(STEP)
        prompts = self.table.column(PROMPT)
        examples = []
        for rows in places:
            first = int(rows[0])
            examples.append(
                Example(
                    step=int(steps[first].as_py()),
                    prompt=prompts[first].as_py(),
                    rows=tuple(int(row) for row in self._numbered(rows[:EXAMPLE_ROWS]).tolist()),
                )
            )
        return tuple(examples)
