from django.apps import AppConfig
from django.db.models.signals import post_delete


class BenchmarksConfig(AppConfig):
    name = "benchmarks"
    verbose_name = "Evidence and benchmarks"

    def ready(self) -> None:
        from benchmarks.models import Artifact  # app loading: models exist only once apps are ready
        from benchmarks.storage import remove_artifact_file

        # Every deleted artifact row (a cascade from its run or candidate included) removes its file.
        post_delete.connect(remove_artifact_file, sender=Artifact, dispatch_uid="kvselect-artifact-file")
