"""Fixtures of the record tests: the lifecycle world (tests.support.lifecycle: the owners' certificates and a
decided selection) and the demo-like selection (tests.support.records)."""

import pytest

from tests.support.lifecycle import lifecycle_certs, lifecycle_selection, tied_selection
from tests.support.records import demo_like_selection


@pytest.fixture
def demo_like(architect, team, owners, engines, settings, tmp_path):
    """The demo's selection with measured runs of the five tests per candidate; llama.cpp has no
    swap-out run (a missing score)."""
    return demo_like_selection(architect, team, owners, engines, settings, tmp_path)


@pytest.fixture(scope="module")
def dev_certs(tmp_path_factory):
    return lifecycle_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def decided(architect, team, owners, engines, dev_certs, settings):
    return lifecycle_selection(architect, team, owners, engines, dev_certs, settings)


@pytest.fixture
def tied(architect, team, owners, engines, dev_certs, settings):
    """Two vLLM candidates that measured the same: the scores tie exactly, no winner."""
    return tied_selection(architect, team, owners, engines, dev_certs, settings)
