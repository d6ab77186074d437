"""The audit's engine: a table as tensors, its groupings, the metric pass, and how work is sized and run.

:mod:`.sizing` (pieces, buffers, and when keys are counted in bins), :mod:`.encode` (a table as tensors on one
device: integer codes for steps, prompts and trajectories, float64 rewards), :mod:`.groups` (which rows share a
baseline: a scheme's :class:`~.groups.Grouping`, its segments and trajectory units, made once per table and rule),
:mod:`.tally` (the metric pass: one sweep per scheme counting what every metric needs) and :mod:`.threads` (tasks
side by side on the CPU). The formulas themselves (:mod:`..kernel`, :mod:`..moments`) and the metrics built on
the tallies (:mod:`..metrics`) sit above it; the engine imports only the table's columns and the schemes' data.
"""
