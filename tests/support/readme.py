"""What the README states that tests run: its production topology, one command a line."""

from __future__ import annotations

from tests.support.environment import ROOT

TOPOLOGY_MARK = "<!-- production-topology"


def readme_topology() -> list[str]:
    """The README's production commands (the block after the production-topology mark)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text[text.index(TOPOLOGY_MARK) :]
    block = block[block.index("```sh\n") + len("```sh\n") :]
    return [line for line in block[: block.index("```")].splitlines() if line.strip()]
