"""Loading: dump files to the canonical table (:mod:`rollaudit._table`).

Rooms, and what each may import (``tests/test_architecture.py`` checks it):

- :mod:`.base` and :mod:`.options`: the interface every format implements (:class:`~.base.Format`) and the one
  validated object of a load's options (:class:`~.options.LoadOptions`).
- :mod:`.formats`: one plug-in per framework; uses :mod:`.arrow` and :mod:`.torchsave`.
- :mod:`.torchsave`: the safe ``torch.save`` reader; imports no format.
- :mod:`.arrow`: Parquet, Arrow, JSON Lines and CSV read under limits, and column conversions; imports no format.
- :mod:`.registry`: one line per format (:data:`~.registry.FORMATS`), the order detection tries them in.
- :mod:`.run`: ``rollaudit.load``, run discovery, the engine and the cache; finds formats through the registry.
"""
