"""Fuzzing the slime loader: mutated bundled dumps, mutated and spliced pickles, random opcodes, shuffled zips.

Every case ends in a valid canonical table or a RollauditError, within
CASE_SECONDS, and no hostile payload ever runs (see harness.run_case).
"""

from __future__ import annotations

import functools
import pickletools
import zipfile

from hypothesis import given
from hypothesis import strategies as st

import rollaudit
from tests.fuzz import harness, mutations, payloads
from tests.fuzz.harness import SLIME_SEEDS, TorchZip, read_sample, run_case, slime_files, slime_options

SEEDS = sorted(SLIME_SEEDS)


@functools.cache
def seed_bytes(seed: str) -> bytes:
    return read_sample(SLIME_SEEDS[seed])


@functools.cache
def seed_zip(seed: str) -> TorchZip:
    return TorchZip.read(seed_bytes(seed))


@functools.cache
def pickle_region(seed: str) -> tuple[int, int]:
    """Where data.pkl's bytes lie in the seed file."""
    import io

    data = seed_bytes(seed)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        info = next(item for item in archive.infolist() if item.filename.endswith("/data.pkl"))
    name_length = int.from_bytes(data[info.header_offset + 26 : info.header_offset + 28], "little")
    extra_length = int.from_bytes(data[info.header_offset + 28 : info.header_offset + 30], "little")
    start = info.header_offset + 30 + name_length + extra_length
    return start, start + info.compress_size


@functools.cache
def directory_region(seed: str) -> tuple[int, int]:
    """Where the central directory and its end record lie."""
    import io

    data = seed_bytes(seed)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return archive.start_dir, len(data)


@functools.cache
def boundaries(seed: str) -> tuple[tuple[int, bytes], ...]:
    """(offset, opcode) of every opcode of the seed's pickle: where whole values can be inserted or replaced."""
    return tuple(
        (position, opcode.code.encode("latin1")) for opcode, _, position in pickletools.genops(seed_zip(seed).pickle)
    )


# Opcodes that push exactly one value and nothing else: a payload can take their place.
_ONE_VALUE = {b"J", b"K", b"M", b"G", b"X", b"\x8c", b"N", b"\x88", b"\x89", b"\x8a"}
ATTACKS = payloads.payloads(harness.MARKER, harness.MARKER.parent / "payload-files", harness.generate.write_torch_zip)


def _case(seed: str, data: bytes, description: str, forced: bool) -> None:
    files, target = slime_files(seed, data)
    options = slime_options(seed)
    if forced:
        options["format"] = "slime"
    run_case("slime", files, target=target, description=description, **options)


@harness.fuzz_settings()
@given(
    seed=st.sampled_from(SEEDS),
    region=st.sampled_from(("file", "pickle", "pickle", "directory")),
    operations=mutations.byte_operations(),
    forced=st.booleans(),
)
def test_mutated_dump_files(seed: str, region: str, operations: list, forced: bool):
    """Bit flips, truncations, insertions and overwritten numbers anywhere in a bundled dump (the zip included)."""
    start, stop = {"file": (0, None), "pickle": pickle_region(seed), "directory": directory_region(seed)}[region]
    data = mutations.apply_operations(seed_bytes(seed), operations, max(start, 0), stop)
    _case(seed, data, f"{seed} {region} {operations}", forced)


@harness.fuzz_settings()
@given(
    seed=st.sampled_from(SEEDS),
    donor=st.sampled_from(SEEDS),
    insertions=st.lists(
        st.tuples(
            st.integers(0, 1 << 20),
            st.one_of(
                st.tuples(st.just("attack"), st.sampled_from(sorted(ATTACKS))),
                st.tuples(st.just("soup"), mutations.opcode_soup(max_size=4)),
                st.tuples(st.just("splice"), st.integers(0, 1 << 20), st.integers(1, 400)),
            ),
            st.booleans(),
        ),
        max_size=3,
    ),
    operations=st.lists(mutations.byte_operation(), max_size=3),
)
def test_mutated_pickles(seed: str, donor: str, insertions: list, operations: list):
    """The seed's data.pkl with hostile payloads, random opcodes and pieces of another dump's pickle put in
    (at opcode boundaries, replacing a value or inserted before one), then byte mutations; the zip stays valid."""
    original = seed_zip(seed).pickle
    marks = boundaries(seed)
    edits = []
    for where, (kind, *arguments), replace in insertions:
        position, code = marks[where % len(marks)]
        if kind == "attack":
            piece = ATTACKS[arguments[0]]
        elif kind == "soup":
            piece = arguments[0]
        else:
            donor_pickle = seed_zip(donor).pickle
            donor_marks = boundaries(donor)
            begin = donor_marks[arguments[0] % len(donor_marks)][0]
            piece = donor_pickle[begin : begin + arguments[1]]
        end = position
        if replace and code in _ONE_VALUE:
            following = [offset for offset, _ in marks if offset > position]
            end = following[0] if following else position
        edits.append((position, end, piece))
    data = original
    for position, end, piece in sorted(edits, key=lambda edit: edit[0], reverse=True):
        if end <= len(data):
            data = data[:position] + piece + data[end:]
    data = mutations.apply_operations(data, operations)
    archive = seed_zip(seed).with_pickle(data).write()
    _case(seed, archive, f"{seed} pickle edits {insertions} then {operations}", forced=False)


@harness.fuzz_settings()
@given(
    body=mutations.opcode_soup(),
    placement=st.sampled_from(("top", "reward", "group_index", "index", "rollout_id", "status", "metadata", "samples")),
    storages=st.dictionaries(st.sampled_from(("0", "1", "2")), st.binary(max_size=64), max_size=3),
    protocol=st.sampled_from((b"", b"\x80\x02", b"\x80\x04", b"\x80\x05")),
)
def test_random_opcodes(body: bytes, placement: str, storages: dict, protocol: bytes):
    """Random opcodes (and calls, storages, tensors, memo operations) as the whole pickle or as one field."""
    if placement == "top":
        data = protocol + body + payloads.STOP
    elif placement == "samples":
        data = payloads.rollout_dump([payloads.plain_sample(0, 1.0), body])
    elif placement == "rollout_id":
        data = payloads.rollout_dump([payloads.plain_sample(0, 1.0)], rollout_id=body)
    else:
        data = payloads.dump_with(placement, body)
    files = {
        "dump.pt": harness.generate.write_torch_zip(harness.MARKER.parent / "soup.pt", data, storages).read_bytes()
    }
    run_case("slime", files, description=f"{placement} {body!r} storages {sorted(storages)}")


@harness.fuzz_settings()
@given(
    seed=st.sampled_from(SEEDS),
    edits=st.lists(
        st.one_of(
            st.tuples(st.just("swap"), st.integers(0, 1000), st.integers(0, 1000)),
            st.tuples(st.just("rename"), st.integers(0, 1000), st.sampled_from(("data.pkl", "data/0", "byteorder"))),
            st.tuples(st.just("drop"), st.integers(0, 1000)),
            st.tuples(st.just("duplicate"), st.integers(0, 1000)),
            st.tuples(st.just("prefix"), st.integers(0, 1000), st.sampled_from(("", "other/", "a/b/", "../"))),
            st.tuples(st.just("junk"), st.binary(max_size=32)),
            st.tuples(st.just("byteorder"), st.sampled_from((b"big", b"little", b"middle", b"", b"big" * 10))),
        ),
        min_size=1,
        max_size=4,
    ),
    deflate=st.sampled_from(("none", "none", "pickle", "all")),
)
def test_zip_members(seed: str, edits: list, deflate: str):
    """Members swapped, renamed, dropped, duplicated, moved to another archive, junk added, a wrong byte order,
    some members deflated: the zip itself stays well-formed."""
    members = list(seed_zip(seed).members)
    prefix = members[0][0].split("/")[0]
    for kind, *arguments in edits:
        if not members:
            break
        index = arguments[0] % len(members) if arguments and isinstance(arguments[0], int) else 0
        if kind == "swap":
            other = arguments[1] % len(members)
            (name_a, body_a), (name_b, body_b) = members[index], members[other]
            members[index], members[other] = (name_a, body_b), (name_b, body_a)
        elif kind == "rename":
            members[index] = (f"{prefix}/{arguments[1]}", members[index][1])
        elif kind == "drop":
            del members[index]
        elif kind == "duplicate":
            members.append(members[index])
        elif kind == "prefix":
            name, body = members[index]
            members[index] = (arguments[1] + name.split("/", 1)[-1], body)
        elif kind == "junk":
            members.append((f"{prefix}/junk", arguments[0]))
        else:
            members = [(name, body) for name, body in members if not name.endswith("/byteorder")]
            members.append((f"{prefix}/byteorder", arguments[0]))

    def compression(name: str) -> int:
        if deflate == "all" or (deflate == "pickle" and name.endswith("data.pkl")):
            return zipfile.ZIP_DEFLATED
        return zipfile.ZIP_STORED

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about duplicate names
        data = TorchZip(tuple(members)).write(compression)
    _case(seed, data, f"{seed} zip edits {edits} deflate {deflate}", forced=False)


def _outcome(path, skip: frozenset) -> object:
    """The table read with ``skip`` as the skimmed fields, or the kind of error."""
    from rollaudit._loaders.formats.pickled import slime
    from rollaudit._loaders.options import LoadOptions

    saved = slime.PER_TOKEN_FIELDS
    slime.PER_TOKEN_FIELDS = skip
    try:
        reward_key = "score" if "reward_key" in path.name else None
        step = slime.read_dump(path, LoadOptions(reward_key=reward_key))
        return step.table if hasattr(step, "table") else (step.sample_index, step.rollout_position, step.advantage)
    except rollaudit.RollauditError as error:
        return type(error).__name__
    finally:
        slime.PER_TOKEN_FIELDS = saved


@harness.fuzz_settings()
@given(seed=st.sampled_from(SEEDS), operations=mutations.byte_operations(), edits=st.lists(
    st.tuples(st.integers(0, 1 << 20), mutations.opcode_soup(max_size=3)), max_size=2))  # fmt: skip
def test_skimming_never_changes_what_a_pickle_reads(seed: str, operations: list, edits: list):
    """The skimming reader and the full one read every mutated pickle alike (the same table, or both an
    error): mutations inside per-token lists, of their keys, of the batch opcodes around them."""
    import warnings

    from rollaudit._loaders.formats.pickled import slime

    data = seed_zip(seed).pickle
    marks = boundaries(seed)
    for where, piece in sorted(edits, reverse=True):
        position = marks[where % len(marks)][0]
        data = data[:position] + piece + data[position:]
    data = mutations.apply_operations(data, operations)
    with harness.case_directory() as directory:
        path = directory / (seed + ".pt")
        path.write_bytes(seed_zip(seed).with_pickle(data).write())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            full, skimmed = _outcome(path, frozenset()), _outcome(path, slime.PER_TOKEN_FIELDS)
    if hasattr(full, "equals"):
        assert hasattr(skimmed, "equals") and skimmed.equals(full), (seed, operations, edits)
    else:
        assert skimmed == full, (seed, operations, edits, full, skimmed)
