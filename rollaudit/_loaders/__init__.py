"""Loading: dump files to the canonical table.

The interface each format implements is :class:`.base.Format` (detect, expand a directory, read one file, combine a
run's files), registered in :data:`.registry.FORMATS`; :func:`.load.load` expands paths, runs the per-file reads
(:mod:`.engine`: this process, workers or Ray, the :mod:`.cache` first) and combines them. Formats: :mod:`.slime`,
:mod:`.verl`, :mod:`.trl`, :mod:`.generic`; the toolkits they share: :mod:`.torch_zip` and :mod:`.unpickle` (safe
``torch.save`` reading), :mod:`.tables` (pyarrow readers) and :mod:`.columns` (column conversions).
"""
