"""Fixtures shared by the selection tests: the owners' development certificates, and a
selection decided on measured evidence (the builders are in tests.support.builders)."""

import pytest

from selection.certificates.signing import issue_dev_certificates
from tests.support.builders import DEV_PASSPHRASE, decided_selection, enrol_owners


@pytest.fixture(scope="module")
def dev_certs(tmp_path_factory):
    return issue_dev_certificates(
        tmp_path_factory.mktemp("certs"),
        {"business": "Wei Zhang", "platform": "Priya Raman", "security": "Jonas Berg"},
        DEV_PASSPHRASE,
    )


@pytest.fixture
def enrolled_owners(owners, dev_certs, settings):
    """The owners with their development certificates enrolled: a record goes to review only then."""
    enrol_owners(owners, dev_certs, DEV_PASSPHRASE, settings)
    return owners


@pytest.fixture
def decided(architect, team, owners, engines):
    """Two candidates with measured concurrency-stress evidence, scored by the task."""
    return decided_selection(architect, team, owners, engines)
