"""``python -m rollaudit``: the ``rollaudit`` command."""

from rollaudit._cli import console

if __name__ == "__main__":
    console()
