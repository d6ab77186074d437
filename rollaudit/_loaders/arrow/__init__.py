"""Tables in: Parquet, Arrow IPC, JSON Lines and CSV read under limits, and the column conversions.

:mod:`.tables` reads a file into Arrow (checked sizes, depth and types); :mod:`.capped` decodes a large Parquet or
Arrow file in a memory-capped child process and maps its columns back through shared memory; :mod:`.columns` turns
columns into the canonical ones (keys, rewards, per-token values to one value a sample, steps split).
"""
