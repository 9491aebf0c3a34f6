from django.apps import AppConfig


class SelectionConfig(AppConfig):
    name = "selection"
    verbose_name = "Engine selection"

    def ready(self) -> None:
        from selection import checks  # noqa: F401  (registers system checks)
