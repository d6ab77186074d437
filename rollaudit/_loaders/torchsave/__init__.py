"""The safe ``torch.save`` reader: a zip of a pickle and raw storages, read without executing the pickle.

:mod:`.pickle_scan` walks a pickle's opcodes without building it (a skim for the fields a loader needs);
:mod:`.unpickle` rebuilds one with an allow-list of globals (tensors as lazy :class:`~.unpickle.StoredTensor`);
:mod:`.torch_zip` opens the archive, checks its members and reads storages under a byte budget. It imports nothing
of the formats.
"""
