from django.core.checks import run_checks
from django.test import override_settings


def test_an_unknown_receive_clock_fails_the_system_check():
    with override_settings(KVSELECT_RECEIVE_CLOCK="wall"):
        errors = [message for message in run_checks() if message.id == "kvselect.E002"]
    assert len(errors) == 1 and "'wall'" in errors[0].msg and "kernel, user" in errors[0].msg
    for clock in ("kernel", "user"):
        with override_settings(KVSELECT_RECEIVE_CLOCK=clock):
            assert not [message for message in run_checks() if message.id == "kvselect.E002"]


def test_the_embedded_broker_is_flagged_by_the_deployment_check_only():
    def warned(**kwargs) -> bool:
        return any(message.id == "kvselect.W001" for message in run_checks(**kwargs))

    with override_settings(CELERY_BROKER_IS_EMBEDDED=True, CELERY_TASK_ALWAYS_EAGER=False):
        assert warned(include_deployment_checks=True)
        assert not warned()  # plain `check` and every other command stay quiet on a laptop
    with override_settings(CELERY_BROKER_IS_EMBEDDED=False, CELERY_TASK_ALWAYS_EAGER=False):
        assert not warned(include_deployment_checks=True)
