"""What may follow the PDF kvselect rendered for a decision record, revision by revision.

A signed record is the PDF kvselect rendered (with its empty signature fields) followed by
incremental updates, one revision each. Every revision after the rendered PDF must be one of:

- **a signature**: exactly one signature field filled, the next in the record's signing order
  (business, platform, security, then at most the organisational seal), in a field the rendered
  PDF already holds; nothing else changed but that field's value and appearance (pyHanko's
  difference analysis says FORM_FILLING at most, and no other field changed);
- **validation data or a document timestamp** (PAdES LTA): pyHanko's LTA_UPDATES at most, and no
  new field except the invisible one a document timestamp fills in the same revision.

Anything else is a finding that fails the record: a new field (empty or signed), annotation,
widget, page, appearance stream or metadata change, a field filled with something that is no
readable signature, a signature out of order, bytes after the last revision. After the last
signature only validation data and document timestamps may follow. This is the EU DSS view of
"modifications after signing", made exact for a document whose only legitimate history kvselect
knows.

Without a signing order (a PDF that is not a kvselect record) the same rules apply from the first
signature's revision on, except that a signature may create its own field.

The facts per revision come from ``selection.certificates.signing`` (pyHanko); the judgment is
here, pure. Findings are message ids with parameters: the pages, the API and verify-record word them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

# pyHanko's ModificationLevel names, in order: what a revision did at most.
LEVELS = ("NONE", "LTA_UPDATES", "FORM_FILLING", "ANNOTATIONS", "OTHER")
LTA_LEVELS = frozenset({"NONE", "LTA_UPDATES"})
SIGNATURE_LEVELS = LTA_LEVELS | {"FORM_FILLING"}

# What each revision after the rendered PDF is (RevisionEntry.kind).
SIGNATURE = "signature"
VALIDATION_DATA = "validation_data"
DOCUMENT_TIMESTAMP = "document_timestamp"
NOT_ALLOWED = "not_allowed"
LTA_KINDS = frozenset({VALIDATION_DATA, DOCUMENT_TIMESTAMP})

# Finding codes (message ids; parameters in the Finding's fields).
CHANGES_DOCUMENT = "revision_changes_document"  # detail: pyHanko's reason
NEW_FIELD = "new_field"  # fields
SEVERAL_SIGNATURES = "several_signatures"  # fields
OUT_OF_ORDER = "out_of_order"  # field, expected
NOT_A_SIGNING_FIELD = "not_a_signing_field"  # field
OTHER_FIELDS_CHANGED = "other_fields_changed"  # field, fields
FORM_FILLED_WITHOUT_SIGNATURE = "form_filled_without_signature"  # fields
UNREADABLE_SIGNATURE = "unreadable_signature"  # field
TIMESTAMP_IN_RECORD_FIELD = "timestamp_in_record_field"  # field
TRAILING_BYTES = "trailing_bytes"  # detail: the byte count
UNREADABLE_REVISION = "unreadable_revision"  # detail
DOCUMENT_TIMESTAMP_INVALID = "document_timestamp_invalid"  # field, detail


@dataclass(frozen=True)
class Finding:
    """One reason a document fails verification: a message id and its parameters."""

    code: str
    revision: int | None = None
    field: str | None = None
    fields: tuple[str, ...] = ()
    expected: str | None = None
    detail: str = ""  # technical detail (pyHanko's own words, a byte count): not translated


@dataclass(frozen=True)
class RevisionFacts:
    """What one revision changed, as pyHanko's difference analysis and the field lists say."""

    index: int
    offset: int  # where its cross-reference section starts (startxref): relates it to a stored prefix
    level: str  # a LEVELS name: the most this revision changed compared with the one before
    detail: str = ""  # pyHanko's reason when the level is OTHER
    changed_fields: frozenset[str] = frozenset()  # fields whose value or appearance changed
    new_fields: frozenset[str] = frozenset()  # signature fields the revision before did not have
    signed: tuple[str, ...] = ()  # fields that received a signature (/Sig) in this revision
    timestamped: tuple[str, ...] = ()  # fields that received a document timestamp (/DocTimeStamp)
    unreadable: tuple[str, ...] = ()  # fields filled with something that is no readable signature


@dataclass(frozen=True)
class RevisionEntry:
    """One revision's verdict, for the report: what it is and whether it may be there."""

    index: int
    offset: int
    kind: str  # SIGNATURE, VALIDATION_DATA, DOCUMENT_TIMESTAMP or NOT_ALLOWED
    field: str | None = None

    @property
    def ok(self) -> bool:
        return self.kind != NOT_ALLOWED


@dataclass(frozen=True)
class SigningOrder:
    """Who signs which field of a kvselect record, in which order."""

    owners: tuple[str, ...]  # the owners' fields, in signing order
    seal: str | None = "seal"  # the organisational seal's field: at most once, after every owner
    rendered_fields: frozenset[str] | None = None  # the fields the rendered PDF holds (None: not known)


@dataclass
class _Walk:
    order: SigningOrder | None
    next_owner: int = 0
    sealed: bool = False
    findings: list[Finding] = field(default_factory=list)

    def add(self, code: str, facts: RevisionFacts, **params) -> None:
        self.findings.append(Finding(code, revision=facts.index, **params))


def _signature_in_order(walk: _Walk, facts: RevisionFacts, name: str) -> None:
    order = walk.order
    if order is None:
        return
    remaining = order.owners[walk.next_owner :]
    if walk.sealed and (name in order.owners or name == order.seal):
        walk.add(OUT_OF_ORDER, facts, field=name)  # nothing signs after the seal
    elif remaining and name == remaining[0]:
        walk.next_owner += 1
    elif order.seal is not None and name == order.seal:
        walk.sealed = True
        if remaining:
            walk.add(OUT_OF_ORDER, facts, field=name, expected=remaining[0])
    elif name in order.owners:
        walk.add(OUT_OF_ORDER, facts, field=name, expected=remaining[0] if remaining else None)
    else:
        walk.add(NOT_A_SIGNING_FIELD, facts, field=name)


def _signature_revision(walk: _Walk, facts: RevisionFacts) -> str:
    name = facts.signed[0]
    if len(facts.signed) > 1:
        walk.add(SEVERAL_SIGNATURES, facts, fields=tuple(sorted(facts.signed)))
    created = facts.new_fields - {name} if walk.order is None else facts.new_fields
    if created:
        walk.add(NEW_FIELD, facts, fields=tuple(sorted(created)))
    rendered = walk.order.rendered_fields if walk.order is not None else None
    if rendered is not None and name not in rendered and name not in created:
        walk.add(NEW_FIELD, facts, fields=(name,))
    _signature_in_order(walk, facts, name)
    others = facts.changed_fields - set(facts.signed)
    if others:
        walk.add(OTHER_FIELDS_CHANGED, facts, field=name, fields=tuple(sorted(others)))
    return name


def _lta_revision(walk: _Walk, facts: RevisionFacts) -> str:
    kind = DOCUMENT_TIMESTAMP if facts.timestamped else VALIDATION_DATA
    for name in facts.timestamped:
        if name not in facts.new_fields:
            walk.add(TIMESTAMP_IN_RECORD_FIELD, facts, field=name)
    created = facts.new_fields - set(facts.timestamped)
    if created:
        walk.add(NEW_FIELD, facts, fields=tuple(sorted(created)))
    if facts.level == "FORM_FILLING":
        walk.add(FORM_FILLED_WITHOUT_SIGNATURE, facts, fields=tuple(sorted(facts.changed_fields)))
    return kind


def _judge(walk: _Walk, facts: RevisionFacts) -> RevisionEntry:
    before = len(walk.findings)
    if facts.level not in SIGNATURE_LEVELS:
        walk.add(CHANGES_DOCUMENT, facts, detail=facts.detail or facts.level)
    for name in facts.unreadable:
        walk.add(UNREADABLE_SIGNATURE, facts, field=name)
    name = None
    if facts.signed:
        name = _signature_revision(walk, facts)
        kind = SIGNATURE
    else:
        kind = _lta_revision(walk, facts)
        name = facts.timestamped[0] if facts.timestamped else None
    if len(walk.findings) > before:
        kind = NOT_ALLOWED
    return RevisionEntry(facts.index, facts.offset, kind, name)


def account_revisions(
    revisions: Sequence[RevisionFacts], order: SigningOrder | None, trailing_bytes: int = 0
) -> tuple[list[RevisionEntry], list[Finding]]:
    """Judge each revision after the rendered PDF (or after the first signature's, without an
    ``order``), in file order; ``trailing_bytes`` after the last revision's end are a finding too."""
    walk = _Walk(order)
    entries = [_judge(walk, facts) for facts in revisions]
    if trailing_bytes:
        walk.findings.append(Finding(TRAILING_BYTES, detail=str(trailing_bytes)))
    return entries, walk.findings


def stored_then_lta_only(entries: Sequence[RevisionEntry], stored_end: int) -> bool:
    """Whether every revision after the first ``stored_end`` bytes (the signed file kvselect stored)
    is validation data or a document timestamp: the stored record plus its own LTA updates."""
    return all(entry.kind in LTA_KINDS for entry in entries if entry.offset >= stored_end)
