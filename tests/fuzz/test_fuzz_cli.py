"""Fuzzing the command line: damaged dumps of every format through inspect, compare and convert.

A user sees exit 0 with the output, or exit 2 with exactly one ``error:``
line on stderr (``warning:`` lines may come before it); never a traceback,
never a half-written output file.
"""

from __future__ import annotations

import functools

from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rollaudit._cli import app
from tests.fuzz import harness, mutations
from tests.fuzz.harness import SLIME_SEEDS, case_directory, read_sample
from tests.fuzz.test_fuzz_tables import SEEDS as TABLE_SEEDS

SEEDS = {
    **{f"{seed}.pt": relative for seed, relative in SLIME_SEEDS.items() if seed not in ("train0", "reward_key")},
    **{name: relative for seeds in TABLE_SEEDS.values() for name, relative in seeds.items()},
}
COMMANDS = {
    "inspect": ("inspect", "{dump}", "--json"),
    "compare": ("compare", "{dump}", "--json", "-o", "{out}.json", "-q"),
    "markdown": ("compare", "{dump}", "--markdown", "-q"),
    "convert": ("convert", "{dump}", "-o", "{out}.parquet", "-q"),
}


@functools.cache
def seed_bytes(relative: str) -> bytes:
    return read_sample(relative)


def _cli_settings() -> settings:
    profile = harness.fuzz_settings()
    return settings(profile, max_examples=max(20, profile.max_examples // 5))


@_cli_settings()
@given(
    name=st.sampled_from(sorted(SEEDS)),
    operations=st.one_of(st.just([]), mutations.byte_operations(max_size=4)),
    command=st.sampled_from(sorted(COMMANDS)),
)
def test_cli_on_damaged_dumps(name: str, operations: list, command: str):
    data = mutations.apply_operations(seed_bytes(SEEDS[name]), operations)
    with case_directory() as directory:
        dump = directory / name
        dump.write_bytes(data)
        out = directory / "out"
        arguments = [part.format(dump=dump, out=out) for part in COMMANDS[command]]
        result = CliRunner(env={"COLUMNS": "100"}).invoke(app, arguments, catch_exceptions=True)
        note = f"{command} {name} {operations}: exit {result.exit_code}, {result.exception!r}\n{result.output[-2000:]}"
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            saved = harness.save_failure("cli", {name: data}, note, {"loader": "cli", "target": None, "options": {}})
            raise AssertionError(f"{note}\ninput saved in {saved}") from result.exception
        assert result.exit_code in (0, 2), note
        assert "Traceback" not in result.output, note
        errors = [line for line in result.stderr.splitlines() if not line.startswith("warning: ")]
        if result.exit_code == 2:
            assert len(errors) == 1 and errors[0].startswith("error: "), note
        else:
            assert errors == [], note
        written = sorted(path.name for path in directory.iterdir() if path.name != name)
        assert all(not item.startswith(".") for item in written), note  # no temporary file left
        if result.exit_code != 0:
            assert written == [], note
        assert not harness.MARKER.exists()
    stats = harness.STATS.setdefault("cli", harness.LoaderStats())
    stats.cases += 1
    if result.exit_code == 0:
        stats.tables += 1
    else:
        stats.errors += 1
