"""Every advantage defect rollaudit names, one line each: its code, how severe, what the dump shows, the signature
the audit tests, where the field reported it, and what to change. ``rollaudit findings`` prints this table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "warning", "note"]
SEVERITY_ORDER: dict[str, int] = {"error": 0, "warning": 1, "note": 2}


@dataclass(frozen=True)
class Code:
    """One finding code: ``code`` (stable: gate rules and baselines name it), ``severity``, ``shows`` (what the
    dump shows, one line), ``signature`` (what the audit tests on the rows), ``reference`` (where the field reported
    it, or empty) and ``fix`` (what to change, where no framework setting says more)."""

    code: str
    severity: Severity
    shows: str
    signature: str
    reference: str
    fix: str


# fmt: off
CODES: tuple[Code, ...] = (
    Code("batch-as-group", "error", "a step centred as one group: one mean and std over every prompt's samples", "the run's advantages fit one group per step on a step of several prompts", "slime #2204", "group by the prompt key (slime: PR #2204)"),
    Code("tail-rows-unnormalised", "error", "fixed-stride slices; the rows past the last full slice divided by eps or left raw", "the rows after the last full slice of n are r / eps (or r) while the slices before them fit", "AReaL #1419, #1673", "pass the batch's group metadata so that groups follow the prompts, or drop the remainder"),
    Code("near-constant-blowup", "error", "a near-constant group whose std is rounding noise, amplified", "a group whose rewards differ by a few units in the last place (or not at all) gets |A| above the estimator's bound", "NeMo-RL #4158", "centre without dividing where the rewards feeding the std are one value (NeMo-RL PR #4158)"),
    Code("masked-rows-in-baseline", "error", "rows never trained (rejected, fully masked) counted in the group's statistics", "the trained rows' advantages fit the group statistics over every row, untrained ones included, and not over the trained rows", "NeMo-RL #3467, verl #6452", "compute the baseline over the rows that are trained"),
    Code("straddling-slices", "error", "groups that are positional slices over rows already filtered, straddling prompts", "the advantages fit consecutive slices of n over the rows left, and the slices mix prompts", "open-instruct #1794", "filter rows after the advantages are computed, or group by the prompt index"),
    Code("key-splits-prompts", "error", "the framework's group key splits one true prompt's samples or merges two prompts", "the run's groups cut the true prompts' groups: a prompt in several groups, or a group of several prompts", "NeMo-RL #3882, #4013", "group by a key of the prompt itself, not of its tokens"),
    Code("turn-level-bias", "warning", "a trajectory's k samples counted k times in its prompt's statistics", "trajectories of several samples, every sample a member of the prompt's statistics; the rows whose sign or size counting each trajectory once changes", "agent-lightning #462, miles #2378", "count each trajectory once in the prompt's statistics, if that is the convention you meant"),
    Code("per-trajectory-key", "error", "grouped by the trajectory, so every group is a singleton", "the advantages fit groups keyed by the trajectory while prompts hold several trajectories", "rllm #605, #776", "group by the prompt (task) id, not the trajectory id"),
    Code("nan-advantages", "error", "NaN or infinite advantages", "an advantage that is not finite on a row whose reward is", "TRL #5773", "give one-sample groups 0, or drop them from the batch"),
    Code("singleton-raw-reward", "error", "a one-sample group given its raw reward as advantage", "a group of one sample whose advantage is its reward (r or r / (1 + eps)), not 0", "verl #7150", "give a one-sample group advantage 0"),
    Code("mixed-reward-scales", "warning", "one baseline over agents or roles whose rewards have different scales", "groups that mix agents whose reward scales differ by 3x or more", "prime-rl #3108", "keep a baseline per agent (prime-rl: hierarchical GRPO)"),
    Code("rows-misaligned", "error", "advantages shifted against their rows", "the recorded column shifted by k rows fits the rewards' advantages exactly, and unshifted does not", "joins, filtered batches", "join advantages to rows by key, not by position"),
    Code("law-equal-rewards", "warning", "two samples of one prompt with equal rewards got different advantages", "within a true group, equal rewards with advantages further apart than the arithmetic's rounding", "", "find what gives equal rewards different advantages"),
    Code("law-order", "warning", "a higher reward got a lower advantage within one prompt", "within a true group, r_i > r_j while A_i < A_j beyond rounding", "", "find what reorders the advantages"),
    Code("law-finite", "warning", "an advantage that is not finite, for no reason a code above explains", "a non-finite advantage on a row whose reward is finite", "", "find where the NaN or infinity comes from"),
    Code("law-bound", "warning", "|A| beyond what the estimator can give", "|A| above (n-1)/sqrt(n) for a std-scaled group of n, the reward range for r - mean and leave-one-out", "", "find what inflates the advantages"),
    Code("law-centred", "warning", "a group's advantages do not sum to about 0", "a row-member centred estimator's group sum beyond rounding", "", "find what shifts the group's advantages"),
)
# fmt: on

BY_CODE: dict[str, Code] = {entry.code: entry for entry in CODES}
LAW_CODES = tuple(entry.code for entry in CODES if entry.code.startswith("law-"))
