"""``python -m rollaudit``: the ``rollaudit`` command."""

from rollaudit._cli import main

if __name__ == "__main__":
    main()
