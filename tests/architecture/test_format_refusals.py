"""The result-file parsers refuse a file in words a page can translate: every error raised in
benchmarks/formats carries a marked message template and its figures (`refused(path, _("..."), ...)`,
`FormatError(Message(_("..."), ...))`), never an English sentence built in place (an f-string, a
literal, `%` or `.format`). The English text stays what the API and the CLI give; the upload page
renders the template in the reader's language, the key path as code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORMATS = ROOT / "benchmarks" / "formats"
# Exceptions that are a caller's bug, never an upload's refusal (`detect_and_parse(data=str)`).
NOT_REFUSALS = {"TypeError"}
# Calls whose first argument (`at`, `Message`) or second (`refused`) is a template: it must be marked.
TEMPLATE_ARGUMENT = {"Message": 0, "at": 0, "refused": 1}
WORD = re.compile(r"[A-Za-z]{2,}")


def built_text(node: ast.AST) -> bool:
    """Whether `node` builds English text in place: an f-string, a literal with words, `%`, `+` or `.format`
    on text, or `str(...)` of something (an exception's English)."""
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return bool(WORD.search(re.sub(r"%\(\w+\)s", "", node.value)))
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mod, ast.Add)):
        return built_text(node.left) or built_text(node.right)
    if isinstance(node, ast.IfExp):
        return built_text(node.body) or built_text(node.orelse)
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name) and func.id == "str":
            return True
        if isinstance(func, ast.Attribute) and func.attr == "format":
            return True
    return False


def called(node: ast.Call) -> str:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def english_refusals(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, source) of each refusal in `tree` whose text is built in place instead of from a template."""
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Raise)
            and isinstance(node.exc, ast.Call)
            and called(node.exc) not in NOT_REFUSALS | set(TEMPLATE_ARGUMENT)  # `refused(path, ...)`: below
        ):
            arguments = [*node.exc.args, *(keyword.value for keyword in node.exc.keywords)]
            if any(built_text(argument) for argument in arguments):
                found.append((node.lineno, ast.unparse(node.exc)))
        if isinstance(node, ast.Call) and called(node) in TEMPLATE_ARGUMENT:
            index = TEMPLATE_ARGUMENT[called(node)]
            if len(node.args) > index and built_text(node.args[index]):
                found.append((node.lineno, ast.unparse(node)))
        if isinstance(node, ast.FunctionDef) and node.name.startswith("sniff"):
            for inner in ast.walk(node):  # a sniffer's refusal is a reason too
                if isinstance(inner, ast.Return) and inner.value is not None and built_text(inner.value):
                    found.append((inner.lineno, ast.unparse(inner)))
    return found


def test_every_parser_refusal_is_a_message_template():
    found = []
    for path in sorted(FORMATS.rglob("*.py")):
        for line, source in english_refusals(ast.parse(path.read_text(encoding="utf-8"))):
            found.append(f"{path.relative_to(ROOT)}:{line}: {source}")
    assert found == [], "\n".join(found)


def test_the_check_finds_an_english_refusal():
    code = """
def parse(doc, path):
    if not doc:
        raise FormatError(f"{path}: expected an object")
    if doc == 1:
        raise FormatError("CSV: empty")
    if doc == 2:
        raise refused(path, "expected a list")
    if doc == 3:
        raise FormatError(Message("%(path)s: no rows" % {"path": path}))
    if doc == 4:
        raise ValueError("slo: expected a dict, got " + str(type(doc)))
    raise refused(path, _("expected a list, got %(type)s"), type=type_name(doc))

def sniff(source):
    return f"no {KEY!r} key"
"""
    assert sorted({line for line, _ in english_refusals(ast.parse(code))}) == [4, 6, 8, 10, 12, 16]
