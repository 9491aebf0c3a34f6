"""The `clip` filter bounds a free text by the room it has on the page, in display columns."""

from selection.templatetags.kvselect import clip


def test_short_text_is_kept_with_its_whitespace_folded():
    assert clip("Community only;\n platform   team", 40) == "Community only; platform team"


def test_long_text_is_cut_at_the_column_limit_with_an_ellipsis():
    assert clip("abcdefghij", 4) == "abcd…"


def test_a_cjk_character_takes_two_columns():
    assert clip("支持合同包含全天候升级通道", 8) == "支持合同…"
    assert clip("ab支持", 6) == "ab支持"


def test_empty_values_stay_empty():
    assert clip(None, 10) == "" and clip("", 10) == ""
