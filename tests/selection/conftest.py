"""Fixtures shared by the selection tests: the three owners and their development certificates."""

import pytest

from selection.certificates.signing import issue_dev_certificates
from selection.models import Membership
from tests.selection.web_helpers import DEV_PASSPHRASE, ROLES


@pytest.fixture(scope="module")
def dev_certs(tmp_path_factory):
    return issue_dev_certificates(
        tmp_path_factory.mktemp("certs"),
        {"business": "Wei Zhang", "platform": "Priya Raman", "security": "Jonas Berg"},
        DEV_PASSPHRASE,
    )


@pytest.fixture
def owners(make_user, team):
    return {role: make_user(role, team, Membership.Role.REVIEWER) for role in ROLES}
