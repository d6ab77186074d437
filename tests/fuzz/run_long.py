"""The long fuzz run: the hypothesis fuzz tests at 20,000 cases each, and atheris (coverage-guided) when installed.

    python tests/fuzz/run_long.py                       # hypothesis, profile "long"; prints one JSON document
    python tests/fuzz/run_long.py --examples 2000       # a shorter run
    python tests/fuzz/run_long.py --atheris --runs 20000  # atheris, each loader, seeded with the bundled samples
    python tests/fuzz/run_long.py --replay DIR          # run one saved failing case again

The JSON document gives, per loader, the number of cases, how they ended
(table or RollauditError) and the slowest case; and the failures: the
pytest outcome per test and the directories where failing inputs were
saved (``$ROLLAUDIT_FUZZ_FAILURES``, default ``$TMPDIR/rollaudit-fuzz-failures``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FUZZ_TESTS = ("tests/fuzz/test_fuzz_slime.py", "tests/fuzz/test_fuzz_tables.py", "tests/fuzz/test_fuzz_cli.py")
ATHERIS_LOADERS = ("slime", "verl", "trl", "generic")


def run_hypothesis(examples: int | None, tests: list[str], failures: Path) -> dict:
    stats_path = Path(tempfile.mkstemp(prefix="rollaudit-fuzz-stats-", suffix=".json")[1])
    report_path = Path(tempfile.mkstemp(prefix="rollaudit-fuzz-report-", suffix=".xml")[1])
    environment = {
        **os.environ,
        "ROLLAUDIT_FUZZ_PROFILE": "long",
        "ROLLAUDIT_FUZZ_STATS": str(stats_path),
        "ROLLAUDIT_FUZZ_FAILURES": str(failures),
        "ROLLAUDIT_FUZZ_KEEP_CURRENT": "1",
    }
    if examples is not None:
        environment["ROLLAUDIT_FUZZ_EXAMPLES"] = str(examples)
    started = time.perf_counter()
    command = [sys.executable, "-m", "pytest", *tests, "-q", "-p", "no:cacheprovider", f"--junitxml={report_path}"]
    result = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    document = json.loads(stats_path.read_text()) if stats_path.stat().st_size else {"loaders": {}}
    document["seconds"] = round(seconds, 1)
    document["pytest_exit_code"] = result.returncode
    document["tests"] = _junit_outcomes(report_path)
    document["pytest_tail"] = (result.stdout[-3000:] + result.stderr[-3000:]) if result.returncode else ""
    if result.returncode < 0:  # killed by a signal: the case it was running is kept in current-<pid>
        document["crashed_inputs"] = sorted(str(path) for path in failures.glob("current-*"))
    return document


def _junit_outcomes(path: Path) -> dict[str, str]:
    import xml.etree.ElementTree as ElementTree

    outcomes = {}
    try:
        tree = ElementTree.parse(path)
    except (ElementTree.ParseError, OSError):
        return outcomes
    for case in tree.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        failed = case.find("failure") is not None or case.find("error") is not None
        outcomes[name] = "failed" if failed else "passed"
    return outcomes


# ---------------------------------------------------------------------------------------------------------------------
# atheris: libFuzzer's coverage-guided mutations of the bundled samples, through the same harness.


def _seeds(loader: str) -> list[tuple[str, bytes]]:
    from tests.fuzz import harness, test_fuzz_tables

    if loader == "slime":
        return [(Path(relative).name, harness.read_sample(relative)) for relative in harness.SLIME_SEEDS.values()]
    return [(name, harness.read_sample(relative)) for name, relative in test_fuzz_tables.SEEDS[loader].items()]


def atheris_child(loader: str, runs: int, corpus: Path) -> None:
    """One loader under atheris (never returns: libFuzzer exits the process)."""
    import atheris

    with atheris.instrument_imports(include=["rollaudit"]):
        import rollaudit  # noqa: F401
        from rollaudit import _loaders, _table  # noqa: F401
        from rollaudit._loaders import load, registry  # noqa: F401

    from tests.fuzz import harness

    names = [name for name, _ in _seeds(loader)]
    stats_path = os.environ.get("ROLLAUDIT_FUZZ_STATS")

    def one_input(data: bytes) -> None:
        # The first byte picks the file name (format detection and step-in-name rules look at it); the rest is the file.
        name, body = (names[data[0] % len(names)], data[1:]) if data else (names[0], b"")
        if loader == "slime":
            seed = next(seed for seed, path in harness.SLIME_SEEDS.items() if Path(path).name == name)
            files, target = harness.slime_files(seed, body)
            harness.run_case("slime", files, target=target, description=f"atheris {name}")
        else:
            harness.run_case(loader, {name: body}, description=f"atheris {name}")
        stats = harness.STATS[loader]
        if stats_path and stats.cases % 100 == 0:
            harness.write_stats()

    import atexit

    atexit.register(harness.write_stats)
    harness.warm_up()
    atheris.Setup(
        [sys.argv[0], str(corpus), f"-runs={runs}", "-max_len=131072", "-timeout=30", "-rss_limit_mb=4096"],
        one_input,
    )
    atheris.Fuzz()


def run_atheris(runs: int, failures: Path) -> dict:
    results = {}
    for loader in ATHERIS_LOADERS:
        corpus = Path(tempfile.mkdtemp(prefix=f"rollaudit-atheris-{loader}-"))
        for index, (_, data) in enumerate(_seeds(loader)):
            (corpus / f"seed{index}").write_bytes(bytes([index]) + data)
        stats_path = Path(tempfile.mkstemp(prefix=f"rollaudit-atheris-{loader}-", suffix=".json")[1])
        environment = {
            **os.environ,
            "ROLLAUDIT_FUZZ_STATS": str(stats_path),
            "ROLLAUDIT_FUZZ_FAILURES": str(failures),
            "ROLLAUDIT_FUZZ_KEEP_CURRENT": "1",
        }
        started = time.perf_counter()
        command = [sys.executable, __file__, "--atheris-child", loader, "--runs", str(runs), "--corpus", str(corpus)]
        before = set(failures.glob("current-*"))
        result = subprocess.run(command, cwd=failures, env=environment, capture_output=True, text=True)
        if result.returncode == 0:  # libFuzzer exits without Python's atexit: its last case is no crash
            for directory in set(failures.glob("current-*")) - before:
                shutil.rmtree(directory, ignore_errors=True)
        stats = json.loads(stats_path.read_text()) if stats_path.stat().st_size else {"loaders": {}}
        done = re.findall(r"Done (\d+) runs", result.stderr)
        results[loader] = {
            "exit_code": result.returncode,
            "libfuzzer_runs": int(done[-1]) if done else None,
            "seconds": round(time.perf_counter() - started, 1),
            **stats["loaders"].get(loader, {}),
            "tail": result.stderr[-3000:] if result.returncode else "",
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=None, help="cases per fuzz test (default: the long profile)")
    parser.add_argument("--tests", nargs="*", default=list(FUZZ_TESTS), help="fuzz test files or node ids")
    parser.add_argument("--atheris", action="store_true", help="run atheris on every loader instead")
    parser.add_argument("--runs", type=int, default=20_000, help="atheris runs per loader")
    parser.add_argument("--replay", type=Path, help="run one saved failing case again")
    parser.add_argument("--atheris-child", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    default_failures = Path(tempfile.gettempdir()) / "rollaudit-fuzz-failures"
    failures = Path(os.environ.get("ROLLAUDIT_FUZZ_FAILURES") or default_failures)
    failures.mkdir(parents=True, exist_ok=True)
    if arguments.atheris_child:
        atheris_child(arguments.atheris_child, arguments.runs, arguments.corpus)
        return
    if arguments.replay:
        from tests.fuzz import harness

        print(harness.replay(arguments.replay))
        return
    before = set(failures.iterdir())
    if arguments.atheris:
        document = {"atheris": run_atheris(arguments.runs, failures)}
    else:
        document = run_hypothesis(arguments.examples, arguments.tests, failures)
    document["failures_saved"] = sorted(str(path) for path in set(failures.iterdir()) - before)
    print(json.dumps(document, indent=2))


if __name__ == "__main__":
    main()
