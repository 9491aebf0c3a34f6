from django.urls import path

from benchmarks import urls as evidence_urls

from . import views, views_capacity

app_name = "selection"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("selections/new/", views.selection_create, name="create"),
    path("selections/<int:pk>/", views.selection_detail, name="detail"),
    path("selections/<int:pk>/constraints/", views.constraints_edit, name="constraints"),
    path("selections/<int:pk>/scenario/", views.scenario, name="scenario"),
    path("selections/<int:pk>/scenario/accept/", views.scenario_accept, name="scenario-accept"),
    path("selections/<int:pk>/gates/", views.gates, name="gates"),
    path("selections/<int:pk>/candidates/", views.candidates, name="candidates"),
    path("selections/<int:pk>/candidates/<int:candidate_pk>/", views.candidate_edit, name="candidate-edit"),
    path("selections/<int:pk>/candidates/<int:candidate_pk>/capacity/", views_capacity.capacity_page, name="capacity"),
    *evidence_urls.urlpatterns,  # validation, runs, CI tokens and uploads (benchmarks/views.py)
]
from .urls_decision import urlpatterns as decision_urlpatterns  # noqa: E402  steps 6-7: comparison, records, verify
urlpatterns += decision_urlpatterns
