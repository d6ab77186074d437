"""The GPU check script at a small size: on a machine without CUDA it runs the CPU side and says so."""

import torch

from tests.benchmarks.gpu_check import main


def test_gpu_check_runs_small(capsys):
    assert main(["--samples", "20000", "--repeat", "1"]) == 0
    output = capsys.readouterr().out
    assert "nemo-loo" in output and '"samples": 20000' in output
    if not torch.cuda.is_available():
        assert "no CUDA device" in output
