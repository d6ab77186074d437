"""The reference the tool prints from its registries (schemes, formats, JSON Schemas), and compare's output format."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import typing
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

import rollaudit
from rollaudit._cli import app
from rollaudit._loaders.formats import areal, verl
from rollaudit._loaders.formats.pickled import slime
from rollaudit._loaders.registry import FORMATS
from rollaudit._render.registry import COMPARE_RENDERERS, JSON_SCHEMAS

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_dumps"
CORPUS = ROOT.parent / "shared" / "corpus"
# Sample dumps that need a reading option to load (slime's dict rewards name the key trained on).
SAMPLE_OPTIONS = {"reward_key.pt": ["--reward-key", "score"]}
# Corpus runs, each one run directory, with the options they need.
CORPUS_RUNS = [
    ("verl/rollout_data_v1", []),
    ("nemo_rl/grpo", []),
    ("rllm", []),
    ("roll", []),
    ("slime", ["--reward-key", "score"]),
]
GATE_RULES = ["--max", "batch:sign_flip_rate=1%", "--max", "trained:strict_flip_rate=0", "--require", "trajectory-key"]


def run(*args: object, columns: int = 120):
    return CliRunner(env={"COLUMNS": str(columns)}).invoke(app, [str(arg) for arg in args], catch_exceptions=False)


def sample_dumps() -> list[Path]:
    return sorted(path for path in SAMPLES.iterdir() if path.suffix not in (".md", ".py"))


def alphabetical(names) -> list[str]:
    return sorted(names, key=str.casefold)


def styled(*args: object) -> list[str]:
    """The lines a terminal shows (rich's table), styles removed."""
    environment = {"COLUMNS": "120", "FORCE_COLOR": "1", "TTY_COMPATIBLE": "1", "NO_COLOR": None}
    result = CliRunner(env=environment).invoke(app, [str(arg) for arg in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return re.sub(r"\x1b\[[0-9;]*m", "", result.stdout).splitlines()


def table_names(lines: list[str]) -> list[str]:
    """The first cells of a rich table's rows (the names): one per entry, blank on an entry's further lines."""
    return [cell for line in lines if line.startswith("│") and (cell := line.split("│")[1].strip())]


def piped_names(lines: list[str]) -> list[str]:
    return [line for line in lines if not line.startswith("  ")]


def usage_error(*args: object) -> str:
    """The one line on stderr of a command that exits 2, with nothing on stdout."""
    result = CliRunner().invoke(app, [str(arg) for arg in args])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    return result.stderr.strip()


def json_of(*args: object) -> dict:
    result = run(*args)
    assert result.exit_code in (0, 1), result.output  # gate: 1 is a failed rule, still a document
    return json.loads(result.stdout)


def validator(command: str) -> jsonschema.Draft202012Validator:
    result = run("schema", command)
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


# ---------------------------------------------------------------------------------------------------------------------
# rollaudit schemes


def test_schemes_json_is_every_preset_with_its_notes():
    entries = json_of("schemes", "--json")
    assert [entry["name"] for entry in entries] == alphabetical(rollaudit.PRESETS)
    for entry in entries:
        preset = rollaudit.PRESETS[entry["name"]]
        assert entry["definition"] == preset.notes.description
        assert entry["source"] == preset.notes.source
        assert entry["undefined"] == preset.notes.undefined
        # The parameters are a scheme string for the same arithmetic (slicing presets need an n to parse).
        parsed = rollaudit.get_scheme(
            entry["parameters"].replace(")", ", n=8)")
            if "positional" in entry["parameters"] or "legacy" in entry["parameters"]
            else entry["parameters"]
        )
        expected = preset if parsed.n is None else dataclasses.replace(preset, n=8)
        assert parsed == expected, entry["name"]


def test_schemes_piped_is_one_line_per_field():
    lines = run("schemes").stdout.splitlines()
    names = piped_names(lines)
    assert names == alphabetical(rollaudit.PRESETS) and names != list(rollaudit.PRESETS)
    assert "  undefined: rllm drops such groups from training (min_trajs_per_group = 2)" in lines
    assert "  rounding_fix: the defect NeMo-RL PR #4158 fixes" in lines
    assert all(line.startswith("  ") and ": " in line for line in lines if line not in names)


def test_schemes_in_a_terminal_is_a_table_in_alphabetical_order():
    assert table_names(styled("schemes")) == alphabetical(rollaudit.PRESETS)


def test_schemes_name_shows_that_preset_alone_in_every_output():
    listed = {entry["name"]: entry for entry in json_of("schemes", "--json")}
    assert json_of("schemes", "nemo-loo", "--json") == listed["nemo-loo"]  # the object, not a list of one
    lines = run("schemes", "nemo-loo").stdout.splitlines()
    assert piped_names(lines) == ["nemo-loo"]
    assert "  rounding_fix: the defect NeMo-RL PR #4158 fixes" in lines
    assert lines == run("schemes").stdout.splitlines()[lines_of(run("schemes").stdout, "nemo-loo")]
    terminal = styled("schemes", "nemo-loo")
    assert table_names(terminal) == ["nemo-loo"]
    assert any("the defect NeMo-RL PR #4158 fixes" in line for line in terminal)
    # A preset that needs n to run is still shown by name.
    assert piped_names(run("schemes", "positional").stdout.splitlines()) == ["positional"]


def lines_of(listing: str, name: str) -> slice:
    """The lines of ``name``'s entry in a piped listing."""
    lines = listing.splitlines()
    start = lines.index(name)
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("  ")), len(lines))
    return slice(start, end)


def test_schemes_takes_a_scheme_string():
    entry = json_of("schemes", "prompt(scale=none)", "--json")
    assert entry["name"] == "prompt(scale=none)"
    assert rollaudit.get_scheme(entry["parameters"]) == dataclasses.replace(
        rollaudit.get_scheme("prompt(scale=none)"), name=entry["parameters"]
    )
    assert entry["definition"].startswith("the preset prompt with scale=none; the preset: GRPO as intended")
    assert entry["source"] == rollaudit.PRESETS["prompt"].notes.source
    assert piped_names(run("schemes", "prompt(scale=none)").stdout.splitlines()) == ["prompt(scale=none)"]
    # What the string names is escaped in the text, as every line rollaudit prints.
    assert run("schemes", "custom(group_by=a\x1bb)").stdout.splitlines()[0] == "custom(group_by=a\\x1bb)"


def test_schemes_unknown_name_is_one_line_with_the_nearest_preset():
    assert usage_error("schemes", "nemo-lo") == "error: unknown scheme 'nemo-lo' (did you mean 'nemo-loo'?)"
    assert usage_error("schemes", "NEMO-LOO") == "error: unknown scheme 'NEMO-LOO' (did you mean 'nemo-loo'?)"
    assert "did you mean 'nemo-loo'" in usage_error("schemes", "nemo-lo(scale=none)", "--json")
    line = usage_error("schemes", "zzz")
    assert "unknown scheme 'zzz'" in line and "rollaudit schemes" in line
    # A preset with bad parameters: the scheme string's own error.
    assert "unknown key 'scal' (did you mean 'scale'?)" in usage_error("schemes", "prompt(scal=none)")
    assert "needs n" in usage_error("schemes", "positional(scale=none)")


def test_scheme_choices_come_from_the_annotations():
    from rollaudit._audit.schemes import _CHOICES, Scheme

    hints = typing.get_type_hints(Scheme)
    assert _CHOICES["groups"] == typing.get_args(hints["groups"])
    assert _CHOICES["representative"] == ("first", "last", "max", "mean", None)
    assert set(_CHOICES) == {
        name for name, hint in hints.items() if "Literal" in str(hint) and name not in ("name", "notes")
    }
    with pytest.raises(rollaudit.SchemeError, match="dtype='float16' is not one of float64, float32, bfloat16"):
        rollaudit.get_scheme("prompt(dtype=float16)")


# ---------------------------------------------------------------------------------------------------------------------
# rollaudit formats


def test_formats_json_is_every_registered_format():
    entries = {entry["name"]: entry for entry in json_of("formats", "--json")}
    assert list(entries) == alphabetical(FORMATS)
    for name, loader in FORMATS.items():
        entry = entries[name]
        assert entry["reads"] == loader.description
        assert entry["options"] == sorted(loader.options)
        assert entry["recorded_advantages"] == (loader.advantage is not None)
        for default in entry["trained_with"]:
            if default["scheme"] is not None:
                rollaudit.get_scheme(default["scheme"].replace("n=N", "n=8"))
    # The defaults are the constants the loaders stamp on the tables.
    assert entries["verl"]["trained_with"] == [
        {"scheme": verl.V0_DEFAULT[0], "why": verl.V0_DEFAULT[1]},
        {"scheme": verl.V1_DEFAULT[0], "why": verl.V1_DEFAULT[1]},
    ]
    assert entries["slime"]["trained_with"] == [{"scheme": None, "why": slime.DEFAULT_WHY}]
    assert entries["generic"]["trained_with"] == []
    assert areal.NO_ATTEMPT_ID in entries["areal"]["cannot_audit"]
    assert entries["nemo_rl"]["advantage"] == "advantages"


def test_formats_piped_names_each_format():
    lines = run("formats").stdout.splitlines()
    assert piped_names(lines) == alphabetical(FORMATS) and piped_names(lines) != list(FORMATS)
    assert "  trained_with: areal-group: " + areal.DEFAULT[1] in lines


def test_formats_in_a_terminal_is_a_table_in_alphabetical_order():
    lines = styled("formats")
    assert table_names(lines) == alphabetical(FORMATS)
    assert lines[0].strip() == "formats"


def test_formats_detection_order_is_the_loader_s():
    """The loader tries the formats in FORMATS' order; --detection-order prints that order, in every output."""
    assert [entry["name"] for entry in json_of("formats", "--detection-order", "--json")] == list(FORMATS)
    assert piped_names(run("formats", "--detection-order").stdout.splitlines()) == list(FORMATS)
    lines = styled("formats", "--detection-order")
    assert table_names(lines) == list(FORMATS)
    assert lines[0].strip() == "formats (detected in this order)"
    assert list(FORMATS)[-1] == "generic"  # the catch-all is tried last, whatever the listing's order


def test_formats_name_shows_that_format_alone_in_every_output():
    listed = {entry["name"]: entry for entry in json_of("formats", "--json")}
    assert json_of("formats", "slime", "--json") == listed["slime"]  # the object, not a list of one
    listing = run("formats").stdout
    lines = run("formats", "slime").stdout.splitlines()
    assert piped_names(lines) == ["slime"]
    assert lines == listing.splitlines()[lines_of(listing, "slime")]
    assert "  options: n_samples_per_prompt, reward_key" in lines
    terminal = styled("formats", "slime")
    assert table_names(terminal) == ["slime"]
    # Shown as written: rich markup would read "[KEY]" as a style tag and drop it.
    assert any("reward, or reward[KEY]" in line for line in terminal)


def test_formats_unknown_name_is_one_line_with_the_nearest_format():
    line = usage_error("formats", "nosuch")
    assert line.startswith("error: unknown format 'nosuch' (expected one of agent_lightning, areal, art, ")
    assert all(name in line for name in FORMATS)
    assert usage_error("formats", "slim") == "error: unknown format 'slim' (did you mean 'slime'?)"
    assert usage_error("formats", "nemo-rl", "--json") == "error: unknown format 'nemo-rl' (did you mean 'nemo_rl'?)"
    assert usage_error("formats", "SLIME") == "error: unknown format 'SLIME' (did you mean 'slime'?)"


# ---------------------------------------------------------------------------------------------------------------------
# compare --output-format


TIMING = re.compile(r"\b\d+\.\d+ s\b")


def _without_timings(document: dict) -> dict:
    document = copy.deepcopy(document)
    document["info"].pop("seconds")
    for key in ("seconds", "command_seconds"):
        document["load"].pop(key)
    return document


def test_compare_format_choices_are_the_renderers():
    result = run("compare", "--help", columns=200)
    assert "--output-format <terminal|json|markdown>" in result.stdout
    assert list(COMPARE_RENDERERS) == ["terminal", "json", "markdown"]


def test_compare_format_json_and_markdown_match_their_aliases():
    dump = SAMPLES / "fanout"
    assert _without_timings(json_of("compare", dump, "--output-format", "json")) == _without_timings(
        json_of("compare", dump, "--json")
    )
    untimed = [
        [TIMING.sub("N s", line) for line in run("compare", dump, *flags).stdout.splitlines()]
        for flags in (["--output-format", "markdown"], ["--markdown"])
    ]
    assert untimed[0] == untimed[1] and untimed[0][0].startswith("### rollaudit")
    assert run("compare", dump, "--output-format", "json", "--json").exit_code == 0  # the same choice twice


@pytest.mark.parametrize(
    "flags",
    [
        ["--json", "--output-format", "markdown"],
        ["--markdown", "--output-format", "terminal"],
        ["--json", "--markdown"],
    ],
)
def test_compare_conflicting_formats_are_a_usage_error(flags):
    result = CliRunner().invoke(app, ["compare", str(SAMPLES / "fanout"), *flags])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "exclude each other" in result.stderr


# ---------------------------------------------------------------------------------------------------------------------
# rollaudit schema


def test_schema_names_the_commands():
    assert JSON_SCHEMAS == ("compare", "inspect", "gate")
    result = CliRunner().invoke(app, ["schema", "report"])
    assert result.exit_code == 2 and "compare, inspect, gate" in result.stderr


@pytest.mark.parametrize("dump", sample_dumps(), ids=lambda path: path.name)
def test_json_documents_of_every_sample_match_their_schemas(dump):
    options = SAMPLE_OPTIONS.get(dump.name, [])
    validator("compare").validate(json_of("compare", dump, *options, "--json"))
    validator("inspect").validate(json_of("inspect", dump, *options, "--json"))
    validator("gate").validate(json_of("gate", dump, *options, *GATE_RULES, "--json"))


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the conformance corpus is not here")
@pytest.mark.parametrize(("run_directory", "options"), CORPUS_RUNS, ids=[name for name, _ in CORPUS_RUNS])
def test_json_documents_of_corpus_runs_match_their_schemas(run_directory, options):
    dump = CORPUS / run_directory
    validator("compare").validate(
        json_of("compare", dump, *options, "-s", "batch,prompt,trajectory,rllm-grpo,nemo-loo", "--json")
    )
    validator("inspect").validate(json_of("inspect", dump, *options, "--json"))
    validator("gate").validate(json_of("gate", dump, *options, *GATE_RULES, "--json"))


def test_a_document_missing_a_required_key_fails_validation():
    document = json_of("compare", SAMPLES / "fanout", "--json")
    compare = validator("compare")
    compare.validate(document)
    for key in ("trained_with", "summary", "load"):
        broken = {name: value for name, value in document.items() if name != key}
        with pytest.raises(jsonschema.ValidationError, match=key):
            compare.validate(broken)
    metric = next(iter(document["summary"]))
    broken = copy.deepcopy(document)
    broken["summary"][metric]["sign_flip_rate"] = "high"
    with pytest.raises(jsonschema.ValidationError):
        compare.validate(broken)
    gate = json_of("gate", SAMPLES / "fanout", *GATE_RULES, "--json")
    del gate["rules"][0]["passed"]
    with pytest.raises(jsonschema.ValidationError, match="passed"):
        validator("gate").validate(gate)
