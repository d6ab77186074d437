"""Auditing: a canonical table to a Report.

:mod:`.engine` is the machinery under the formulas: a table as tensors (:mod:`.engine.encode`), its groupings
(:mod:`.engine.groups`), the metric pass (:mod:`.engine.tally`), piece sizing (:mod:`.engine.sizing`) and work side
by side on the CPU (:mod:`.engine.threads`). On it: :mod:`.schemes` describes every scheme as data; :mod:`.kernel`
recomputes advantages (torch, every group at once; :mod:`.moments` for a framework's own float32 moments);
:mod:`.metrics` makes the metrics from the passes. :mod:`.trained_with` says which scheme produced the recorded
advantages and which scheme the run trained with, :mod:`.rounding` what its rounding made, :mod:`.findings` which
defects the run's advantages show (codes from one registry, and the laws every estimator keeps), :mod:`.advice`
what to change; :mod:`.report` holds the result; :mod:`.api` is the interface the next stages use (``recompute``,
``audit``). :mod:`.describe` says what a table holds without recomputing.
"""
