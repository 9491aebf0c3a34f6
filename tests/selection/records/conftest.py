"""The demo-like selection of `test_record_document` (measured runs of five tests per candidate),
shared with the record's claim tests."""

from tests.selection.records.test_record_document import demo_like, owners  # noqa: F401 (fixtures)
