"""NeMo-RL's own group key (``nemo_prompt_ids``): its padded prompt-token rows, the whole row where the data
processor truncated the prompt; the nemo-* presets group by it, the reference by the true prompt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import rollaudit
from rollaudit._audit.presets import PRESETS, get_scheme
from rollaudit._audit.schemes import Scheme, key_column
from rollaudit._errors import SchemeError
from rollaudit._loaders.formats.nemo_rl import NEMO_KEY
from rollaudit._table import make_table

PAD = 0


def _line(prompt: list[int], response: list[int], env: list[int], reward: float, *, text: str, loss: float = 1.0,
          width: int = 0, lengths: bool = True) -> dict:  # fmt: skip
    """One NeMo-RL training row (a batch of one), right-padded with PAD to ``width`` tokens."""
    tokens = prompt + response + env
    padding = [PAD] * max(0, width - len(tokens))
    line = {
        "content": [[text, "response", "Environment: correct"]],
        "rewards": [reward],
        "token_ids": [tokens + padding],
        "token_loss_mask": [[0] * len(prompt) + [1] * len(response) + [0] * (len(env) + len(padding))],
        "sample_loss_mask": [loss],
        "advantages": [[0.0] * (len(tokens) + len(padding))],
    }
    if lengths:
        line["input_lengths"] = [len(tokens)]
    return line


def _write(path: Path, lines: list[dict], blank_lines: bool = False) -> Path:
    separator = "\n\n" if blank_lines else "\n"
    path.write_text(separator.join(json.dumps(line) for line in lines) + "\n")
    return path


def _keys(path: Path) -> tuple[list[str], list[str]]:
    table = rollaudit.load(path, cache=False)
    return table.column("prompt").to_pylist(), table.column(NEMO_KEY).to_pylist()


LONG = "<|user|> " + " ".join(f"w{index}" for index in range(40)) + " <|assistant|>"


@pytest.mark.parametrize("blank_lines", [False, True])
def test_a_truncated_prompt_is_keyed_by_its_whole_row(tmp_path, blank_lines):
    lines = [
        _line([1, 2, 3], [7, 8], [9], 1.0, text="<|user|> ab <|assistant|>", width=12),
        _line([1, 2, 3], [7, 6, 5], [9], 0.0, text="<|user|> ab <|assistant|>", width=12),
        # The data processor's cut: 4 tokens of a 40-word prompt, loss multiplier 0.
        _line([4, 4, 4, 4], [7, 8], [9], 1.0, text=LONG, loss=0.0, width=12),
        _line([4, 4, 4, 4], [7, 5, 5], [9, 9], 0.0, text=LONG, loss=0.0, width=12),
        # A truncated response (overlong filtering): loss multiplier 0, but the prompt is whole.
        _line([1, 2, 3], [5, 5, 5, 5, 5, 5], [9], 0.0, text="<|user|> ab <|assistant|>", loss=0.0, width=12),
    ]
    path = _write(tmp_path / "train_data_step1.jsonl", lines, blank_lines)
    prompt, nemo = _keys(path)
    assert prompt == ["1,2,3", "1,2,3", "4,4,4,4", "4,4,4,4", "1,2,3"]
    assert nemo == ["1,2,3", "1,2,3", "4,4,4,4,7,8,9", "4,4,4,4,7,5,5,9,9", "1,2,3"]
    table = rollaudit.load(path, cache=False)
    recomputed = rollaudit.recompute(table, ["nemo-loo(dtype=float64)", "prompt"], device="cpu")
    nemo_loo = recomputed.column("advantage:nemo-loo(dtype=float64)").to_pylist()
    assert nemo_loo[2:4] == [0.0, 0.0]  # each its own group
    assert recomputed.column("advantage:prompt").to_pylist()[2:4] == pytest.approx([0.7071061, -0.7071061])
    notes = rollaudit.audit(table, schemes=["nemo-loo"], device="cpu").info["loader_notes"]
    assert any("on 2 rows the data processor cut the prompt" in note for note in notes)


def test_a_short_prompt_text_or_a_kept_loss_is_no_truncation(tmp_path):
    lines = [
        # Loss multiplier 1: whatever the text, the prompt was not cut.
        _line([4, 4, 4, 4], [7, 8], [9], 1.0, text=LONG, width=8),
        # Loss multiplier 0 and no more words than tokens: a truncated response, not a cut prompt.
        _line([4, 4, 4, 4], [7, 5], [9], 0.0, text="<|user|> a <|assistant|>", loss=0.0, width=8),
    ]
    prompt, nemo = _keys(_write(tmp_path / "train_data_step1.jsonl", lines))
    assert nemo == prompt == ["4,4,4,4", "4,4,4,4"]


def test_prompts_equal_once_padded_share_nemos_key(tmp_path):
    # NeMo-RL pads the prompt rows with the pad id: [3, PAD] and [3] pad to the same row, one group upstream.
    lines = [
        _line([3, PAD], [7], [9], 1.0, text="x", width=6),
        _line([3], [7], [9], 0.0, text="x", width=6),
        _line([3], [8, 8], [9], 1.0, text="x", width=6),
    ]
    prompt, nemo = _keys(_write(tmp_path / "train_data_step1.jsonl", lines))
    assert prompt == ["3,0", "3", "3"]
    assert nemo == ["3", "3", "3"]


def test_without_padding_the_pad_id_is_unknown_and_keys_stay_as_written(tmp_path):
    lines = [_line([3, PAD], [7], [9], 1.0, text="x"), _line([3], [7, 7], [9], 0.0, text="x")]
    prompt, nemo = _keys(_write(tmp_path / "train_data_step1.jsonl", lines))
    assert nemo == prompt == ["3,0", "3"]


def test_without_input_lengths_a_truncated_row_drops_its_padding(tmp_path):
    lines = [
        _line([1, 2], [7], [9], 1.0, text="<|user|> a <|assistant|>", width=8, lengths=False),
        _line([4, 4, 4, 4], [7, 8], [9], 1.0, text=LONG, loss=0.0, width=8, lengths=False),
    ]
    _, nemo = _keys(_write(tmp_path / "train_data_step1.jsonl", lines))
    # No input_lengths: no pad id to read, so the whole written row.
    assert nemo == ["1,2", "4,4,4,4,7,8,9,0"]


def test_the_nemo_presets_group_by_nemos_key_where_the_table_has_it_else_by_the_prompt():
    for name in ("nemo-loo", "nemo-grpo", "nemo-loo-4158", "nemo-grpo-4158"):
        assert PRESETS[name].framework_key == NEMO_KEY and PRESETS[name].group_by == "prompt"
    scheme = get_scheme("nemo-loo")
    assert key_column(scheme, ["prompt", NEMO_KEY]) == NEMO_KEY
    assert key_column(scheme, ["prompt"]) == "prompt"
    assert key_column(get_scheme("nemo-loo(framework_key=none)"), ["prompt", NEMO_KEY]) == "prompt"
    assert key_column(get_scheme("prompt"), ["prompt", NEMO_KEY]) == "prompt"
    rewards = [1.0, 0.0, 1.0, 0.0]
    plain = make_table(reward=rewards, prompt=[1, 1, 1, 1])
    keyed = make_table(reward=rewards, prompt=[1, 1, 1, 1], **{NEMO_KEY: ["a", "a", "b", "c"]})
    schemes = ["nemo-loo(dtype=float64, scale=none)", "prompt(scale=none)"]
    on_plain = rollaudit.recompute(plain, schemes, device="cpu")
    on_keyed = rollaudit.recompute(keyed, schemes, device="cpu")
    loo = [1 - 1 / 3, -2 / 3, 1 - 1 / 3, -2 / 3]
    assert on_plain.column(0).to_pylist() == pytest.approx(loo)
    assert on_keyed.column(0).to_pylist() == pytest.approx([1.0, -1.0, 0.0, 0.0])
    assert on_plain.column(1).to_pylist() == on_keyed.column(1).to_pylist() == pytest.approx([0.5, -0.5, 0.5, -0.5])


def test_framework_key_is_a_parameter_of_the_scheme_string():
    scheme = get_scheme("nemo-loo")
    assert f"framework_key={NEMO_KEY}" in scheme.spec_string()
    assert get_scheme(scheme.spec_string()) == scheme
    assert get_scheme("nemo-loo(framework_key=none)").framework_key == ""
    assert get_scheme("prompt(framework_key=my_key)").framework_key == "my_key"
    with pytest.raises(SchemeError, match="framework_key"):
        Scheme(framework_key=3)  # type: ignore[arg-type]


def test_input_lengths_not_a_batch_of_one_leave_the_pad_id_unknown(tmp_path):
    lines = [_line([3, PAD], [7], [9], 1.0, text="x", width=6), _line([3], [7], [9], 0.0, text="x", width=6)]
    lines[0]["input_lengths"] = [4, 4]
    prompt, nemo = _keys(_write(tmp_path / "train_data_step1.jsonl", lines))
    assert nemo == prompt == ["3,0", "3"]
