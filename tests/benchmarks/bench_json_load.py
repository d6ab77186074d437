"""Benchmark: each JSON Lines format's read against a one-core ``msgspec`` decode of the fields it reads.

    python tests/benchmarks/bench_json_load.py            # 400 copies of each format's corpus file, 3 rounds
    python tests/benchmarks/bench_json_load.py --small    # 20 copies, 1 round, reports only (for CI)

For each format, its own corpus file (the sample dump where the corpus is not beside the project) is copied once
per step, as a 400-step run holds it, and read three ways, in interleaved rounds (the best of each):

- ``msgspec``: every copy read and decoded by ``msgspec`` into typed Structs of the fields the format reads (those
  its reader is asked for, recorded from a first read), on one core;
- ``reader``: the JSON Lines reader asked what the format asks of it (the file read, the fields decoded and typed
  as columns), on one core;
- ``jobs=1``: the format's own ``read`` of every copy (the reader, then the format's own work: keys, steps, the
  canonical table), one after another, on one core;
- ``jobs=2``: the same copies split between two worker processes (as ``--jobs 2`` reads a run's files).

Target: ``reader`` at least 70% of ``msgspec``'s rate (``jobs=1`` is reported: a small file's own work is
mostly fixed cost, paid once per task where a format reads several files at once). Checked at full size; reported
at --small.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import shutil
import sys
import tempfile
import time
import typing
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpus"
SAMPLES = ROOT / "sample_dumps"
MIN_SHARE_OF_MSGSPEC = 0.7
# format -> (corpus file, sample file standing in for it, the file's name under each step's directory)
FILES = {
    "verl": ("verl/rollout_data_v1/5.jsonl", "verl_v1/rollout_data/3.jsonl", "{step}.jsonl"),
    "areal": (
        "areal/experiments/logs/rl/gsm8k-agent-grpo/trial0/rollout/3/102.jsonl",
        "areal/rollout/2/40.jsonl",
        "rollout/{step}/100.jsonl",
    ),
    "nemo_rl": ("nemo_rl/grpo/train_data_step3.jsonl", "nemo_rl/train_data_step3.jsonl", "train_data_step{step}.jsonl"),
    "open_instruct": (
        "open_instruct/rollouts/oi_default_rollouts_000000.jsonl",
        "open_instruct/rollouts/demo_rollouts_000000.jsonl",
        "s{step}/rollouts/demo_rollouts_000000.jsonl",
    ),
    "tinker": (
        "tinker/iteration_000003/train_rollout_summaries.jsonl",
        "tinker/iteration_000001/train_rollout_summaries.jsonl",
        "iteration_{step:06d}/train_rollout_summaries.jsonl",
    ),
    "prime_rl": (
        "prime_rl/rollouts/step_1/train/all/traces.jsonl",
        "prime_rl/rollouts/step_1/train/all/traces.jsonl",
        "rollouts/step_{step}/train/all/traces.jsonl",
    ),
    "roll": (
        "roll/agentic/rollout_dump_data.step_3.jsonl",
        "roll/rollout_dump_data.step_2.jsonl",
        "rollout_dump_data.step_{step}.jsonl",
    ),
    "generic": ("", "generic/rollouts.jsonl", "step{step}.jsonl"),
}


def _source(name: str) -> Path:
    corpus, sample, _ = FILES[name]
    return CORPUS / corpus if corpus and (CORPUS / corpus).is_file() else SAMPLES / sample


def _copies(name: str, steps: int, directory: Path) -> list[Path]:
    source, pattern = _source(name), FILES[name][2]
    paths = []
    for step in range(1, steps + 1):
        path = directory / name / pattern.format(step=step)
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, path)
        paths.append(path)
    return paths


def _read_all(name: str, paths: list[Path]) -> int:
    from rollaudit._loaders.options import LoadOptions
    from rollaudit._loaders.registry import FORMATS

    loader = FORMATS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sum(loader.read(path, LoadOptions()).num_rows for path in paths)


def _schemas_read(name: str, path: Path) -> list:
    """The calls (schema, options) the format's read makes of the JSON Lines reader, on one file."""
    from unittest import mock

    from rollaudit._loaders.arrow import json_lines

    asked = []
    real = json_lines.read_json_lines

    def recording(path, schema=None, **options):
        asked.append((schema, options))
        return real(path, schema, **options)

    with mock.patch.object(json_lines, "read_json_lines", recording):
        _read_all(name, [path])
    return asked


def _python_type(kind) -> object:
    import pyarrow as pa

    flat = {pa.float64(): float, pa.int64(): int, pa.string(): str, pa.bool_(): bool}
    if kind in flat:
        return flat[kind] | None
    if pa.types.is_list(kind):
        return list[_python_type(kind.value_type)] | None  # type: ignore[misc]
    return typing.Any


def _decoder(schemas: list) -> object:
    """A msgspec decoder of JSON objects into a Struct of the fields read, typed (a number field takes ints too)."""
    import msgspec

    fields = {field.name: field.type for schema, _ in schemas if schema is not None for field in schema}
    if not fields:
        return msgspec.json.Decoder(dict)  # a table whose every field is read
    members = [(f"f{i}", _python_type(kind), None) for i, kind in enumerate(fields.values())]
    renamed = dict(zip([member[0] for member in members], fields, strict=True))
    return msgspec.json.Decoder(msgspec.defstruct("Fields", members, rename=renamed, gc=False))


def _msgspec_all(decoder, paths: list[Path]) -> int:
    """Each file read and decoded, as a script using msgspec would."""
    return sum(len(decoder.decode_lines(path.read_bytes().removeprefix(b"\xef\xbb\xbf"))) for path in paths)


def _json_layer_all(calls: list, paths: list[Path]) -> int:
    """The JSON Lines reader alone, asked what the format asks of it, on every copy."""
    from rollaudit._loaders.arrow import json_lines

    return sum(
        json_lines.read_json_lines(path, schema, **options).num_rows for path in paths for schema, options in calls
    )


def _timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def measure(name: str, steps: int, rounds: int, pool: concurrent.futures.Executor, directory: Path) -> dict:
    paths = _copies(name, steps, directory)
    size = sum(path.stat().st_size for path in paths)
    calls = _schemas_read(name, paths[0])
    decoder = _decoder(calls)
    halves = [paths[0::2], paths[1::2]]
    _read_all(name, paths[:2])  # warm-up: imports and first calls
    best = {"msgspec": float("inf"), "reader": float("inf"), "jobs=1": float("inf"), "jobs=2": float("inf")}
    for _ in range(rounds):
        best["msgspec"] = min(best["msgspec"], _timed(lambda: _msgspec_all(decoder, paths)))
        best["reader"] = min(best["reader"], _timed(lambda: _json_layer_all(calls, paths)))
        best["jobs=1"] = min(best["jobs=1"], _timed(lambda: _read_all(name, paths)))
        best["jobs=2"] = min(best["jobs=2"], _timed(lambda: list(pool.map(_read_all, [name, name], halves))))
    return {"bytes": size, **best}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="20 copies, 1 round, report only")
    parser.add_argument("--formats", nargs="*", default=sorted(FILES))
    args = parser.parse_args(argv)
    steps, rounds = (20, 1) if args.small else (400, 3)
    failed = []
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as temporary, concurrent.futures.ProcessPoolExecutor(2, context) as pool:
        list(pool.map(_read_all, ["generic", "generic"], [[], []]))  # start both workers before timing
        print(
            f"{'format':14} {'MB':>7} {'msgspec MB/s':>13} {'reader MB/s':>12} {'share':>6} {'jobs=1 MB/s':>12} ",
            end="",
        )
        print(f"{'jobs=2 MB/s':>12}")
        for name in args.formats:
            result = measure(name, steps, rounds, pool, Path(temporary))
            megabytes = result["bytes"] / 1e6
            rates = {key: megabytes / result[key] for key in ("msgspec", "reader", "jobs=1", "jobs=2")}
            share = rates["reader"] / rates["msgspec"]
            print(
                f"{name:14} {megabytes:7.1f} {rates['msgspec']:13.0f} {rates['reader']:12.0f} {share:6.2f} "
                f"{rates['jobs=1']:12.0f} {rates['jobs=2']:12.0f}"
            )
            if share < MIN_SHARE_OF_MSGSPEC:
                failed.append(name)
    print("share: the JSON Lines reader's rate on the fields a format reads, as a share of a one-core msgspec decode")
    print(f"(target >= {MIN_SHARE_OF_MSGSPEC})")
    if failed and not args.small:
        print("below target: " + ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
