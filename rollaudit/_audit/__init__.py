"""Auditing: a canonical table to a Report.

:mod:`.schemes` describes every scheme as data; :mod:`.encode` turns a table into tensors once; :mod:`.groups` and
:mod:`.kernel` recompute advantages (torch, every group at once); :mod:`.metrics` compares each scheme with the
reference; :mod:`.fit` says which scheme produced the recorded advantages; :mod:`.report` holds the result;
:mod:`.api` is the interface the next stages use (``recompute``, ``audit``). :mod:`.describe` says what a table
holds without recomputing.
"""
