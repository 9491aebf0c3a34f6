"""What may follow the rendered record, revision by revision (selection.domain.record_integrity): each
rule with a history it accepts and one it refuses."""

from selection.domain import record_integrity as ri
from selection.domain.record_integrity import RevisionFacts, SigningOrder

ORDER = SigningOrder(
    owners=("business", "platform", "security"), rendered_fields=frozenset({"business", "platform", "security", "seal"})
)


def signature(index: int, name: str, **facts) -> RevisionFacts:
    return RevisionFacts(
        index,
        index * 1000,
        facts.pop("level", "FORM_FILLING"),
        signed=(name,),
        changed_fields=facts.pop("changed_fields", frozenset({name})),
        **facts,
    )


def dss(index: int, **facts) -> RevisionFacts:
    return RevisionFacts(index, index * 1000, facts.pop("level", "LTA_UPDATES"), **facts)


HONEST = [signature(2, "business"), dss(3), signature(4, "platform"), dss(5), signature(6, "security"), dss(7)]


def codes(revisions, order=ORDER, trailing=0) -> list[str]:
    return [f.code for f in ri.account_revisions(revisions, order, trailing)[1]]


def test_the_owners_signatures_in_order_with_validation_data_between_are_accepted():
    entries, findings = ri.account_revisions(HONEST, ORDER)
    assert findings == []
    assert [(e.kind, e.field) for e in entries][:3] == [
        ("signature", "business"),
        ("validation_data", None),
        ("signature", "platform"),
    ]
    assert all(e.ok for e in entries)


def test_a_seal_after_the_owners_is_accepted_and_before_them_or_twice_it_is_not():
    assert codes([*HONEST, signature(8, "seal")]) == []
    assert codes([signature(2, "business"), signature(3, "seal"), signature(4, "platform")]) == [
        ri.OUT_OF_ORDER,
        ri.OUT_OF_ORDER,
    ]
    assert codes([*HONEST, signature(8, "seal"), signature(9, "security")]) == [ri.OUT_OF_ORDER]


def test_an_owner_signing_out_of_turn_names_who_signs_next():
    findings = ri.account_revisions([signature(2, "platform")], ORDER)[1]
    assert [(f.code, f.field, f.expected) for f in findings] == [(ri.OUT_OF_ORDER, "platform", "business")]


def test_a_signature_in_a_field_no_owner_signs_fails():
    assert codes([signature(2, "mallory")]) == [ri.NEW_FIELD, ri.NOT_A_SIGNING_FIELD]


def test_new_fields_after_the_rendered_record_fail_empty_or_signed():
    assert codes(
        [
            *HONEST,
            dss(8, level="FORM_FILLING", new_fields=frozenset({"overlay"}), changed_fields=frozenset({"overlay"})),
        ]
    ) == [
        ri.NEW_FIELD,
        ri.FORM_FILLED_WITHOUT_SIGNATURE,
    ]
    assert codes([*HONEST, dss(8, new_fields=frozenset({"invisible"}))]) == [ri.NEW_FIELD]


def test_a_signature_revision_that_changes_another_field_fails():
    revision = signature(2, "business", changed_fields=frozenset({"business", "seal"}))
    assert codes([revision]) == [ri.OTHER_FIELDS_CHANGED]


def test_a_content_change_fails_with_pyhankos_reason():
    findings = ri.account_revisions([*HONEST, dss(8, level="OTHER", detail="unexplained xrefs")], ORDER)[1]
    assert [(f.code, f.revision, f.detail) for f in findings] == [(ri.CHANGES_DOCUMENT, 8, "unexplained xrefs")]


def test_a_document_timestamp_in_a_new_field_is_lta_and_in_a_record_field_is_not():
    stamped = dss(8, timestamped=("ts-1",), new_fields=frozenset({"ts-1"}))
    entries, findings = ri.account_revisions([*HONEST, stamped], ORDER)
    assert findings == [] and entries[-1].kind == ri.DOCUMENT_TIMESTAMP
    assert codes([*HONEST, dss(8, timestamped=("seal",))]) == [ri.TIMESTAMP_IN_RECORD_FIELD]


def test_unreadable_signatures_and_several_at_once_fail():
    assert codes([dss(2, level="FORM_FILLING", unreadable=("business",), changed_fields=frozenset({"business"}))]) == [
        ri.UNREADABLE_SIGNATURE,
        ri.FORM_FILLED_WITHOUT_SIGNATURE,
    ]
    both = RevisionFacts(
        2, 2000, "FORM_FILLING", signed=("business", "platform"), changed_fields=frozenset({"business", "platform"})
    )
    assert ri.SEVERAL_SIGNATURES in codes([both])


def test_bytes_after_the_last_revision_fail():
    assert codes(HONEST, trailing=0) == []
    findings = ri.account_revisions(HONEST, ORDER, trailing_bytes=97)[1]
    assert [(f.code, f.detail) for f in findings] == [(ri.TRAILING_BYTES, "97")]


def test_without_an_order_a_signature_may_create_its_own_field_but_nothing_else():
    own = RevisionFacts(
        3,
        3000,
        "FORM_FILLING",
        signed=("approval",),
        new_fields=frozenset({"approval"}),
        changed_fields=frozenset({"approval"}),
    )
    assert codes([own], order=None) == []
    extra = RevisionFacts(
        3,
        3000,
        "FORM_FILLING",
        signed=("approval",),
        new_fields=frozenset({"approval", "x"}),
        changed_fields=frozenset({"approval"}),
    )
    assert codes([extra], order=None) == [ri.NEW_FIELD]


def test_the_stored_record_followed_only_by_lta_updates_is_still_the_stored_record():
    entries = ri.account_revisions([*HONEST, dss(8), dss(9, timestamped=("ts",), new_fields=frozenset({"ts"}))], ORDER)[
        0
    ]
    assert ri.stored_then_lta_only(entries, stored_end=8000)
    assert not ri.stored_then_lta_only(entries, stored_end=6000)  # the security signature came after that file
