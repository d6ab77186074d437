"""Findings: the defects a dump shows, each named by a stable code (:mod:`.codes`, the registry), with the rows,
groups and steps that show it (:mod:`.finding`). :mod:`.laws` checks the laws every GRPO-family estimator keeps
within a true group; :mod:`.detect` tests each code's signature on the rows."""
