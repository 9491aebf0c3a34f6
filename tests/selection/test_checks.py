from django.core.checks import run_checks
from django.test import override_settings


def test_an_unknown_receive_clock_fails_the_system_check():
    with override_settings(KVSELECT_RECEIVE_CLOCK="wall"):
        errors = [message for message in run_checks() if message.id == "kvselect.E002"]
    assert len(errors) == 1 and "'wall'" in errors[0].msg and "kernel, user" in errors[0].msg
    for clock in ("kernel", "user"):
        with override_settings(KVSELECT_RECEIVE_CLOCK=clock):
            assert not [message for message in run_checks() if message.id == "kvselect.E002"]
