from django.urls import path

from . import views

app_name = "selection"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
]
