"""The ``rollaudit`` command line: the group and its error mapping (:mod:`.app`), the options declared once
(:mod:`.options`), what commands share (:mod:`.io`: loading with progress, writing outputs), the commands
(:mod:`.commands`; ``watch`` in :mod:`.watch`) and the reference printed from the registries (:mod:`.reference`:
``formats``, ``schemes``, ``schema``)."""

from __future__ import annotations

from . import commands as _commands  # noqa: F401 - registers the commands on the app
from . import reference as _reference  # noqa: F401 - registers the reference commands
from . import watch as _watch  # noqa: F401 - registers the watch command
from .app import app, console, main

__all__ = ["app", "console", "main"]
