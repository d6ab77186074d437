"""A load from paths to canonical tables: find the run, read its files, combine them.

:mod:`.load` is ``rollaudit.load``; :mod:`.discover` finds one run's files down a directory (never merging two
runs); :mod:`.engine` runs the per-file reads (this process, worker processes or Ray), each a
:class:`~.item.WorkItem`, the :mod:`.cache` consulted first. It finds formats through the registry alone.
"""
