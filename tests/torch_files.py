"""A whole ``torch.save`` file through rollaudit's safe reader, tensors read: what the reader tests look at."""

from __future__ import annotations

import os
from typing import Any

from rollaudit._loaders.torchsave.torch_zip import MAX_PICKLE_BYTES, TorchArchive


def load_torch_file(path: str | os.PathLike, *, max_pickle_bytes: int = MAX_PICKLE_BYTES, warn: bool = True) -> Any:
    """What ``torch.load(path)`` would give, tensors included, without running code named by the file: unknown
    classes come back as placeholders (one warning line per file); a damaged or hostile file raises InputError."""
    with TorchArchive(path, max_pickle_bytes=max_pickle_bytes) as archive:
        return archive.unpickle(lazy_tensors=False, warn=warn)
