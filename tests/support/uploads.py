"""Shared helpers for the reliability tests: token clients, uploads, what is on disk."""

from __future__ import annotations

from pathlib import Path

from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from benchmarks.uploads.tokens import create_upload_token


def token_client(selection, user, name: str = "ci") -> APIClient:
    _, raw = create_upload_token(selection=selection, user=user, name=name)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    return client


def upload(
    client: APIClient,
    candidate_id: int,
    data: bytes,
    filename: str = "result.json",
    key: str = "",
    test: str = "concurrency_stress",
    **fields,
):
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    body = {"file": SimpleUploadedFile(filename, data), "test": test, **fields}
    return client.post(f"/api/v1/candidates/{candidate_id}/results/", body, format="multipart", **headers)


def media_files(root) -> list[Path]:
    root = Path(root)
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []
