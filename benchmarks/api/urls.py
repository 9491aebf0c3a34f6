from django.urls import path

from benchmarks.api import views

urlpatterns = [
    path("candidates/<int:candidate_id>/results/", views.CandidateResultsView.as_view(), name="candidate-results"),
    path(
        "candidates/<int:candidate_id>/validations/",
        views.CandidateValidationsView.as_view(),
        name="candidate-validations",
    ),
    path("runs/<int:run_id>/", views.RunDetailView.as_view(), name="run-detail"),
    path("runs/<int:run_id>/cancel/", views.RunCancelView.as_view(), name="run-cancel"),
    path("runs/<int:run_id>/requests/", views.RunRequestsView.as_view(), name="run-requests"),
]
