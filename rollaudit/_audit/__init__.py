"""Auditing: a canonical table to a Report.

:mod:`.schemes` describes every scheme as data; :mod:`.encode` turns a table into tensors once; :mod:`.groups` and
:mod:`.kernel` recompute advantages (torch, every group at once; :mod:`.moments` for a framework's own float32
moments); :mod:`.tally` counts each scheme against the reference in one pass and :mod:`.metrics` makes the
metrics from it; :mod:`.threads` runs that work side by side on the CPU. :mod:`.fit` says which scheme produced
the recorded advantages, :mod:`.trained` which scheme the run trained with, :mod:`.rounding` what its rounding
made, :mod:`.advice` what to change; :mod:`.report` holds the result; :mod:`.api` is the interface the next
stages use (``recompute``, ``audit``). :mod:`.describe` says what a table holds without recomputing.
"""
