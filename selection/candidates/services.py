"""Candidates (a catalog engine, its version, flags, endpoint and hardware) and the engine catalog."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

from selection.audit import audit
from selection.models import Candidate, Engine, Selection
from selection.secretbox import encrypt
from selection.setup.services import require_editor

CATALOG_PATH = Path(settings.BASE_DIR) / "selection" / "fixtures" / "engine_catalog.json"


@transaction.atomic
def add_candidate(*, selection: Selection, user, data: dict[str, Any], api_key: str = "") -> Candidate:
    require_editor(user, selection)
    candidate = Candidate(selection=selection, **data)
    if api_key:
        candidate.api_key_encrypted = encrypt(api_key)
    candidate.full_clean()
    candidate.save()
    audit(
        selection,
        user,
        "candidate.added",
        field="candidate",
        new={"id": candidate.pk, "engine": candidate.engine.slug, "version": candidate.engine_version},
    )
    return candidate


@transaction.atomic
def update_candidate(*, candidate: Candidate, user, data: dict[str, Any], api_key: str | None = None) -> Candidate:
    require_editor(user, candidate.selection)
    old = {k: getattr(candidate, k) for k in data}
    for field, value in data.items():
        setattr(candidate, field, value)
    if api_key is not None:
        candidate.api_key_encrypted = encrypt(api_key) if api_key else ""
    candidate.full_clean()
    candidate.save()
    audit(
        candidate.selection,
        user,
        "candidate.changed",
        field=f"candidate:{candidate.pk}",
        old=old,
        new={k: getattr(candidate, k) for k in data},
    )
    return candidate


@transaction.atomic
def load_engine_catalog(path: Path | None = None) -> int:
    """Load (or update) the engine catalog fixture into Engine rows. Returns the engine count."""
    document = json.loads(Path(path or CATALOG_PATH).read_text(encoding="utf-8"))
    version = str(document.get("catalog_version", "unversioned"))
    count = 0
    for entry in document["engines"]:
        Engine.objects.update_or_create(
            slug=entry["slug"],
            defaults={"name": entry.get("name", entry["slug"]), "catalog_version": version, "data": entry},
        )
        count += 1
    return count
