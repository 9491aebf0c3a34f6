import pytest

from selection.models import Selection
from selection.tasks import refresh_scenario
from tests.support.servers import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_a_real_worker_runs_a_task_through_the_broker(celery_worker_process, selection_with_constraints):
    Selection.objects.filter(pk=selection_with_constraints.pk).update(scenario="", scenario_reasons=[])
    refresh_scenario.delay(selection_with_constraints.pk)
    scenario = wait_for(lambda: Selection.objects.get(pk=selection_with_constraints.pk).scenario, timeout=60)
    assert scenario == "A"
    assert celery_worker_process.poll() is None
