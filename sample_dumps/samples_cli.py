"""The command line every sample generator shares: write the samples next to it, or ``--check`` that the committed
ones equal fresh ones (exit 1 naming each that differs)."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path


def same_bytes(committed: Path, fresh: Path) -> bool:
    return committed.read_bytes() == fresh.read_bytes()


def run(
    argv: list[str] | None,
    description: str,
    here: Path,
    write_all: Callable[[Path], list[Path]],
    same: Callable[[Path, Path], bool] = same_bytes,
) -> int:
    """``write_all(root)`` writes every sample under ``root`` and gives their paths relative to it; ``same`` tells a
    committed sample from a fresh one."""
    parser = argparse.ArgumentParser(description=description.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare the committed samples with fresh ones")
    args = parser.parse_args(argv)
    if not args.check:
        for path in write_all(here):
            print(f"wrote {here.name}/{path}")
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        differ = [path for path in write_all(root) if not (here / path).is_file() or not same(here / path, root / path)]
    for path in differ:
        print(f"differs from a fresh sample: {here.name}/{path}", file=sys.stderr)
    return 1 if differ else 0
