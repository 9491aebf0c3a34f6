"""The record lifecycle's world for the signing client's tests (tests.support.lifecycle)."""

import pytest

from tests.support.lifecycle import lifecycle_certs, lifecycle_selection


@pytest.fixture(scope="module")
def dev_certs(tmp_path_factory):
    return lifecycle_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def decided(architect, team, owners, engines, dev_certs, settings):
    return lifecycle_selection(architect, team, owners, engines, dev_certs, settings)
