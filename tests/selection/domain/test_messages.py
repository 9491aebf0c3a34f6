import json

import pytest

from selection.domain.messages import (
    CLAUSE_SEPARATOR,
    NAME_SEPARATOR,
    Join,
    Message,
    load,
    plain,
    render,
    to_json,
)


def screened() -> Message:
    """A sentence with every kind of value: text, a nested message (with a nested name) and a join."""
    dimension = Message("Memory allocation and reuse")
    reasons = CLAUSE_SEPARATOR.join(
        [
            Message(
                "%(dimension)s %(score)s < gate %(threshold)s",
                {"dimension": dimension, "score": "0.40", "threshold": "0.60"},
            ),
            Message(
                "%(dimension)s: no evidence (gate %(threshold)s)",
                {"dimension": Message("Observability"), "threshold": "0.50"},
            ),
        ]
    )
    return Message("%(name)s is screened out: %(reasons)s.", {"name": "LMDeploy 0.6", "reasons": reasons})


def test_str_is_the_english_sentence():
    assert (
        str(
            Message(
                "max input %(value)s tokens >= %(threshold)s -> long documents", {"value": "128K", "threshold": "32K"}
            )
        )
        == "max input 128K tokens >= 32K -> long documents"
    )
    assert str(Message("does not fit")) == "does not fit"
    headroom = Message("fits with 30%% headroom on %(gpus)s GPU(s)", {"gpus": 2})
    assert str(headroom) == "fits with 30% headroom on 2 GPU(s)"


def test_nested_messages_and_joins_render_in_english():
    assert str(screened()) == (
        "LMDeploy 0.6 is screened out: Memory allocation and reuse 0.40 < gate 0.60; "
        "Observability: no evidence (gate 0.50)."
    )
    assert str(NAME_SEPARATOR.join(["a +0.03", Message("b"), 3])) == "a +0.03, b, 3"
    assert str(Join([], CLAUSE_SEPARATOR)) == ""


def test_to_dict_is_json_and_round_trips():
    message = screened()
    data = message.to_dict()
    assert data["msgid"] == "%(name)s is screened out: %(reasons)s."
    assert data["params"]["name"] == "LMDeploy 0.6"
    assert data["params"]["reasons"]["separator"] == {
        "msgid": "; ",
        "params": {},
        "context": "list separator between clauses",
    }
    assert json.loads(json.dumps(data)) == data
    again = Message.from_dict(json.loads(json.dumps(data)))
    assert again == message and hash(again) == hash(message) and str(again) == str(message)
    assert "context" not in Message("plain").to_dict()


def test_translate_is_applied_to_every_template_nested_ones_and_separators_included():
    seen = []

    def shout(msgid, context):
        seen.append((msgid, context))
        return "[" + msgid + "]"

    assert render(screened(), shout) == (
        "[LMDeploy 0.6 is screened out: "
        "[[Memory allocation and reuse] 0.40 < gate 0.60]"
        "[; ][[Observability]: no evidence (gate 0.50)].]"
    )
    assert {msgid for msgid, _ in seen} == {
        "%(name)s is screened out: %(reasons)s.",
        "%(dimension)s %(score)s < gate %(threshold)s",
        "%(dimension)s: no evidence (gate %(threshold)s)",
        "Memory allocation and reuse",
        "Observability",
        "; ",
    }
    assert ("; ", "list separator between clauses") in seen
    # the stored form renders the same
    assert render(screened().to_dict(), shout) == render(screened(), shout)


def test_values_are_never_translated_or_formatted_again():
    message = Message("%(name)s leads", {"name": "100% %(x)s"})
    assert render(message, lambda msgid, context: "->" + msgid) == "->100% %(x)s leads"


def test_a_translation_that_breaks_its_placeholders_falls_back_to_english():
    message = Message("%(name)s leads by more than the tie margin %(margin)s", {"name": "vLLM", "margin": "0.02"})
    assert render(message, lambda msgid, context: "%(nom)s 领先") == "vLLM leads by more than the tie margin 0.02"
    assert render(message, lambda msgid, context: "%(name)s 领先 100%") == "vLLM leads by more than the tie margin 0.02"


def test_legacy_plain_strings_and_other_values_pass_unchanged():
    assert render("max input 128K tokens >= 32K -> long documents") == "max input 128K tokens >= 32K -> long documents"
    assert render("x", lambda msgid, context: "translated") == "x"
    assert render(None) is None and render(0.5) == 0.5
    assert load("legacy") == "legacy" and load({"other": 1}) == {"other": 1}


def test_to_json_and_plain_walk_nested_data():
    result = {
        "sentences": [screened()],
        "tie_break": {"explanation": Message("no candidate passes the gates")},
        "notes": ("legacy note",),
        "score": 0.5,
    }
    stored = to_json(result)
    assert json.loads(json.dumps(stored)) == stored
    assert stored["sentences"][0] == screened().to_dict()
    english = {
        "sentences": [str(screened())],
        "tie_break": {"explanation": "no candidate passes the gates"},
        "notes": ["legacy note"],
        "score": 0.5,
    }
    assert plain(stored) == english and plain(result) == english


def test_bad_messages_are_refused_when_built():
    with pytest.raises(ValueError, match="does not fit its params"):
        Message("%(name)s is recommended", {})
    with pytest.raises(TypeError, match="params.names"):
        Message("%(names)s", {"names": ["a", "b"]})  # a list needs a separator: use a Join
    with pytest.raises(ValueError, match="placeholder"):
        Message("%(a)s", {"not a name": "x", "a": "y"})
    with pytest.raises(TypeError, match="separator"):
        Join(["a"], ", ")
    with pytest.raises(ValueError, match="not a stored message"):
        Message.from_dict({"params": {}})
