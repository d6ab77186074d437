"""The README's notebook section as a Jupyter notebook: ``readme.ipynb`` holds each of its lines as a code cell.

    python tests/notebook/readme_notebook.py            # exit 1 where the notebook and the README differ
    python tests/notebook/readme_notebook.py --update   # write the notebook from the README

The section is the ``python`` block under the README's "In a notebook" heading; blank lines part its cells and
hold none.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
NOTEBOOK = Path(__file__).with_name("readme.ipynb")
HEADING = "## In a notebook"


def readme_cells(text: str | None = None) -> list[str]:
    """The lines of the README's notebook block, one cell each."""
    lines = (text if text is not None else README.read_text(encoding="utf-8")).splitlines()
    start = lines.index(next(line for line in lines if line.startswith(HEADING)))
    opening = next(index for index in range(start, len(lines)) if lines[index].strip() == "```python")
    closing = next(index for index in range(opening + 1, len(lines)) if lines[index].strip() == "```")
    return [line.rstrip() for line in lines[opening + 1 : closing] if line.strip()]


def notebook_cells(path: Path = NOTEBOOK) -> list[str]:
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    return [cell.source for cell in notebook.cells if cell.cell_type == "code"]


def write_notebook(path: Path = NOTEBOOK) -> None:
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in readme_cells()]
    for number, cell in enumerate(notebook.cells):
        cell.id = f"readme-{number:02d}"  # stable ids: the file changes only when the README does
    nbformat.write(notebook, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="write the notebook from the README")
    if parser.parse_args(argv).update:
        write_notebook()
        return 0
    return 0 if notebook_cells() == readme_cells() else 1


if __name__ == "__main__":
    sys.exit(main())
