"""A trainer-like writer for the watch tests: writes a run's dumps into a directory the way trainers do.

``python trainer.py SCENARIO RUN_DIR``:

halves   verl steps 1-3, each file written in two halves (the first ending mid-line) a second apart
slime-rollout  a slime rollout dump (the zip written in two halves half a second apart)
slime-train    its train dump, the same way
rename   AReaL version directories 3 and 4, each filled under another name and renamed into place
burst    verl steps 1-30 written back to back, faster than they are audited
corrupt  verl step 4: a file of whole lines that are not JSON
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"


def verl_step(step: int) -> bytes:
    """The bundled verl v0 dump, as the dump of ``step``."""
    text = (SAMPLES / "verl" / "rollout_data" / "1.jsonl").read_text(encoding="utf-8")
    return text.replace('"step": 1,', f'"step": {step},').encode()


def write_in_halves(path: Path, data: bytes, pause: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    middle = len(data) // 2
    if data[middle - 1 : middle] == b"\n":
        middle += 1  # the first half ends mid-line
    with open(path, "wb") as handle:
        handle.write(data[:middle])
        handle.flush()
        os.fsync(handle.fileno())
        time.sleep(pause)
        handle.write(data[middle:])


def main(scenario: str, run: Path) -> None:
    if scenario == "halves":
        for step in (1, 2, 3):
            write_in_halves(run / "rollout_data" / f"{step}.jsonl", verl_step(step), 1.0)
            time.sleep(0.3)
    elif scenario in ("slime-rollout", "slime-train"):
        name = "rollout_data/0.pt" if scenario == "slime-rollout" else "train_data/0_0.pt"
        write_in_halves(run / name, (SAMPLES / "dump_details" / name).read_bytes(), 0.5)
    elif scenario == "rename":
        rollout = run / "rollout"
        rollout.mkdir(parents=True)
        for version in (3, 4):
            staging = rollout / f"staging{version}"
            staging.mkdir()
            for task in sorted((SAMPLES / "areal" / "rollout" / "2").iterdir()):
                (staging / task.name).write_bytes(task.read_bytes())
            time.sleep(0.5)
            staging.rename(rollout / str(version))
            time.sleep(1.0)
    elif scenario == "burst":
        for step in range(1, 31):
            path = run / "rollout_data" / f"{step}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(verl_step(step))
    elif scenario == "corrupt":
        (run / "rollout_data").mkdir(parents=True, exist_ok=True)
        (run / "rollout_data" / "4.jsonl").write_bytes(b"not json\n" * 10)
    else:
        raise SystemExit(f"unknown scenario {scenario}")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
