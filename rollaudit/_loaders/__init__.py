"""Loading: dump files to the canonical table.

The interface each format implements is :class:`.base.Format` (detect, expand a directory to one run's files, read
one file, combine a run's files; the options it reads, its default preset and what it cannot audit), registered
in :data:`.registry.FORMATS`. :func:`.load.load` finds the run (:mod:`.discover`: down a directory, never merging
two runs), runs the per-file reads (:mod:`.engine`: this process, workers or Ray, the :mod:`.cache` first) and
combines them. Formats: :mod:`.slime` (with :mod:`.slime_fields`), :mod:`.verl`, :mod:`.trl`, :mod:`.areal`,
:mod:`.rllm`, :mod:`.nemo_rl`, :mod:`.roll`, :mod:`.agent_lightning`, :mod:`.generic`. What they share: the safe
``torch.save`` reader (:mod:`.torch_zip`, :mod:`.pickle_scan`, :mod:`.unpickle`), the Arrow readers
(:mod:`.tables`, :mod:`.capped`: Parquet and Arrow decoded in a memory-capped child) and column conversions
(:mod:`.columns`), and the validated options (:mod:`.options`).
"""
