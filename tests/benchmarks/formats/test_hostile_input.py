"""Hostile input: only FormatError / UnrecognisedFormat (or success) may escape the parsers."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.formats import FormatError, UnrecognisedFormat, detect_and_parse, format_names
from benchmarks.result import NormalizedResult

from .conftest import FIXTURES

REAL = sorted(
    p.name for p in FIXTURES.iterdir() if p.suffix in (".json", ".jsonl", ".csv") and p.name != "aiperf.inputs.json"
)
SETTINGS = settings(
    max_examples=int(__import__("os").environ.get("FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def attempt(data, filename=None, fmt=None):
    try:
        result = detect_and_parse(data, filename, format=fmt)
    except (FormatError, UnrecognisedFormat) as error:
        message = str(error)
        assert message
        # the registry's last-resort wrappers mean a parser bug, not a precise rejection
        assert "could not parse (" not in message, message
        assert "could not inspect the file" not in message, message
        return None
    assert isinstance(result, NormalizedResult)
    json.dumps(result.to_native(), allow_nan=False, default=str)  # the result is storable
    return result


@pytest.mark.reliability
@SETTINGS
@given(st.binary(max_size=2048))
def test_arbitrary_bytes(data):
    attempt(data, "upload.bin")


@pytest.mark.reliability
@SETTINGS
@given(st.sampled_from(REAL), st.data())
def test_mutated_real_files(name, data):
    original = (FIXTURES / name).read_bytes()
    operation = data.draw(st.sampled_from(["truncate", "flip", "insert", "delete"]))
    position = data.draw(st.integers(0, max(len(original) - 1, 0)))
    if operation == "truncate":
        mutated = original[:position]
    elif operation == "flip":
        mutated = (
            original[:position]
            + bytes([original[position] ^ data.draw(st.integers(1, 255))])
            + original[position + 1 :]
        )
    elif operation == "insert":
        mutated = original[:position] + data.draw(st.binary(min_size=1, max_size=16)) + original[position:]
    else:
        mutated = original[:position] + original[position + data.draw(st.integers(1, 64)) :]
    fmt = data.draw(st.sampled_from([None] + format_names()))
    attempt(mutated, name, fmt)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@pytest.mark.reliability
@SETTINGS
@given(st.sampled_from([n for n in REAL if not n.endswith((".csv", ".jsonl"))]), st.data())
def test_real_files_with_a_value_replaced(name, data):
    """Replace one value anywhere in a real file with arbitrary JSON (wrong types, nesting)."""
    doc = json.loads((FIXTURES / name).read_text().replace("Infinity", "1e308"))
    paths = []

    def walk(node, path):
        if len(paths) > 2000:
            return
        if isinstance(node, dict):
            for key, value in node.items():
                paths.append(path + [key])
                walk(value, path + [key])
        elif isinstance(node, list):
            for index, value in enumerate(node[:5]):
                paths.append(path + [index])
                walk(value, path + [index])

    walk(doc, [])
    path = data.draw(st.sampled_from(paths))
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = data.draw(JSON_VALUES)
    attempt(json.dumps(doc).encode(), name)
    attempt(json.dumps(doc).encode(), name, data.draw(st.sampled_from(format_names())))
