"""The benchmark against the scripts a user writes instead, at a small size, so CI keeps it runnable (the figures
are reported, not asserted: timing targets are judged at full size, on a quiet machine)."""

import json

from tests.benchmarks.bench_vs_scripts import main


def test_benchmark_against_the_scripts_runs_small(capsys):
    assert main(["--small"]) == 0
    output = capsys.readouterr().out
    results = json.loads(output[output.index("\n[") + 1 :])
    assert [result["run"] for result in results] == ["corpus:8", "real:8"]
    for result in results:
        assert result["rollaudit_s"] > 0 and result["import_torch_s"] > 0 and result["pandas_s"] > 0
        assert result["fastest"] in ("duckdb", "polars", "pandas")
