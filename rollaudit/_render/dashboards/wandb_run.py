"""``--wandb PROJECT``: the audit's scalars in a Weights & Biases run of rollaudit's own (the optional extra
``rollaudit[wandb]``).

The run is new every time (a fresh id, ``resume="never"``, job type ``rollaudit``), whatever ``WANDB_RUN_ID`` or
``WANDB_RESUME`` the trainer's environment holds: rollaudit never resumes or writes into the trainer's run. It
joins the trainer's project and ``--wandb-group``, so that the two overlay. W&B's own environment variables
(``WANDB_ENTITY``, ``WANDB_MODE=offline``, ``WANDB_DIR``, ...) are honoured; each step is logged at the dump's step.

W&B writes under ``WANDB_DIR`` (else the working directory), and when that cannot be used it silently falls back to
the system's temporary directory, following a link planted at it meanwhile. So the directory is checked first (a
directory, no link, not under a file, writable by trying) and named to ``wandb.init``: an unusable one is one
``error:`` line and exit 2, with nothing written anywhere. W&B's service writes its debug log under
``WANDB_CACHE_DIR`` (by default in the home directory): unset, it is pointed into the W&B directory, so that
nothing lands outside it. Console capture, system metrics, code, git and requirements snapshots are off: the run
holds the audit alone.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..._errors import UsageError, warn
from .dashboard import StepScalars, clean_label
from .tensorboard_events import check_directory, open_directory

INSTALL = "pip install 'rollaudit[wandb]'"
JOB_TYPE = "rollaudit"
MAX_NAME = 128
"""W&B's limit on project and group names."""
_PROJECT_FORBIDDEN = set("/\\#?%:")
_WHAT = "a directory for W&B's files (WANDB_DIR)"
_SETTINGS: dict[str, Any] = {
    "console": "off",
    "silent": True,
    "x_disable_stats": True,
    "x_disable_meta": True,
    "x_disable_machine_info": True,
    "x_save_requirements": False,
    "disable_git": True,
    "disable_code": True,
    "save_code": False,
    "disable_job_creation": True,
}


def check_project(project: str) -> str:
    """A W&B project name as the user gave it, or one line saying what is wrong with it."""
    expected = f"a W&B project name: at most {MAX_NAME} characters, none of / \\ # ? % : or control characters"
    if not project.strip() or len(project) > MAX_NAME or clean_label(project) != project:
        raise UsageError(f"--wandb {project!r} is not a W&B project name", expected=expected)
    if _PROJECT_FORBIDDEN & set(project):
        raise UsageError(f"--wandb {project!r} is not a W&B project name", expected=expected)
    return project


def wandb_root() -> Path:
    """Where W&B puts its ``wandb`` directory: ``WANDB_DIR``, else the working directory."""
    named = os.environ.get("WANDB_DIR")
    return Path(named).expanduser() if named else Path.cwd()


def _wandb_subdirectory(root: Path) -> Path:
    """The directory W&B writes in: ``.wandb`` where one exists (W&B's own rule), else ``wandb``."""
    return root / ".wandb" if os.path.lexists(root / ".wandb") else root / "wandb"


def check_wandb_directory() -> Path:
    """The W&B root directory, proved usable before any work (see the module's docstring); one line if not."""
    root = check_directory(wandb_root(), _WHAT)
    subdirectory = _wandb_subdirectory(root)
    try:
        mode = os.lstat(subdirectory).st_mode
    except FileNotFoundError:
        return root
    except OSError as error:
        raise UsageError(f"cannot be used: {error.strerror or error}", file=str(subdirectory), expected=_WHAT) from None
    if stat.S_ISLNK(mode):
        raise UsageError("is a symbolic link", file=str(subdirectory), expected=f"{_WHAT}, not a link to one")
    if not stat.S_ISDIR(mode):
        raise UsageError("is not a directory", file=str(subdirectory), expected=_WHAT)
    return root


def _cleaned(value: Any) -> Any:
    """A config value with its text (a scheme string, a path) as :func:`clean_label` leaves it."""
    if isinstance(value, str):
        return clean_label(value)
    if isinstance(value, (list, tuple)):
        return [_cleaned(item) for item in value]
    return value


def _new_id() -> str:
    """A run id of W&B's form (8 of ``[a-z0-9]``), new: never the trainer's ``WANDB_RUN_ID``."""
    import secrets
    import string

    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))


def check_installed() -> None:
    """That wandb imports, before any work (its import takes a second: paid only with ``--wandb``)."""
    try:
        import wandb  # noqa: F401
    except ImportError as error:
        raise UsageError(f"--wandb needs the wandb package ({error})", expected=INSTALL) from None


class WandbRun:
    """A W&B run of rollaudit's own, started at the first step written; ``on_start`` hears one line saying where
    it is."""

    def __init__(
        self,
        project: str,
        group: str,
        config: Mapping[str, Any],
        on_start: Callable[[str], None] | None = None,
    ) -> None:
        check_installed()
        self.project = check_project(project)
        self.group = clean_label(group, MAX_NAME) or "rollaudit"
        self.config = {key: _cleaned(value) for key, value in config.items()}
        self.root = check_wandb_directory()
        self.on_start = on_start
        self.last_step: int | None = None
        self._run: Any = None
        self._skipped = False

    def _start(self) -> Any:
        try:
            import wandb
        except ImportError as error:
            raise UsageError(f"--wandb needs the wandb package ({error})", expected=INSTALL) from None
        self.root = check_wandb_directory()  # again: nothing may have changed since the command started
        os.close(open_directory(self.root, _WHAT))
        os.close(open_directory(_wandb_subdirectory(self.root), _WHAT))
        if not os.environ.get("WANDB_CACHE_DIR"):
            os.environ["WANDB_CACHE_DIR"] = str(_wandb_subdirectory(self.root) / "cache")
        known = getattr(wandb.Settings, "model_fields", {})
        settings = wandb.Settings(**{key: value for key, value in _SETTINGS.items() if key in known})
        try:
            run = wandb.init(
                project=self.project,
                group=self.group,
                job_type=JOB_TYPE,
                name=clean_label(f"rollaudit {self.group}"),
                id=_new_id(),
                resume="never",
                dir=str(self.root),
                config=self.config,
                tags=[JOB_TYPE],
                reinit="create_new",
                settings=settings,
            )
        except Exception as error:  # W&B's own errors (no API key, a refused project): one line
            raise UsageError(f"wandb could not start a run: {' '.join(str(error).split())}") from None
        if os.path.realpath(run.settings.root_dir) != os.path.realpath(self.root):
            with contextlib.suppress(Exception):
                run.finish(exit_code=1)
            raise UsageError("W&B did not write where it was told", file=str(self.root), expected=_WHAT)
        self._run = run
        if self.on_start is not None:
            where = run.url if not run.offline and run.url else f"offline, in {run.settings.sync_dir}"
            self.on_start(f"wandb: run {run.name} ({run.id}) in project {self.project}, group {self.group}: {where}")
        return run

    def write(self, step: StepScalars) -> None:
        """Log one step at the dump's step. W&B takes steps in order: a step audited again after a later one was
        logged (its files changed) is left out of the run, with a warning."""
        if step.step < 0 or (self.last_step is not None and step.step < self.last_step):
            if step.step < 0:
                warn(f"step {step.step} not logged to W&B: its steps count from 0")
            elif not self._skipped:
                warn(
                    f"step {step.step} audited again after step {self.last_step}: W&B takes steps in increasing "
                    "order, so its run keeps the earlier record of a step audited again"
                )
                self._skipped = True
            return
        run = self._run or self._start()
        run.log({**step.scalars, **step.texts}, step=step.step)
        self.last_step = step.step

    def close(self) -> None:
        if self._run is not None:
            run, self._run = self._run, None
            try:
                run.finish()
            except Exception as error:  # the audit is done; W&B's trouble at the end is a warning
                warn(f"wandb: the run did not finish cleanly: {' '.join(str(error).split())}")
