"""The owners' signing command (clients/kvselect-sign) as a wheel the server offers for download, so an
owner installs it with `pip install <the server's URL>/…whl` instead of from a kvselect checkout.

The wheel is built here from the client's source tree, in memory (a pure-Python wheel is a zip with its
metadata: PEP 427 and the core metadata of PEP 566), byte for byte the same for the same sources
(fixed timestamps), so a build tool is not needed at run time and nothing is written into the tree.
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
import tomllib
import zipfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from django.conf import settings

CLIENT_DIR = Path(settings.BASE_DIR) / "clients" / "kvselect-sign"
EPOCH = (1980, 1, 1, 0, 0, 0)  # the zip format's earliest time: the same sources give the same bytes


@dataclass(frozen=True)
class Wheel:
    filename: str
    content: bytes
    sha256: str


def wheel() -> Wheel:
    """The client's wheel for its current sources (rebuilt when a source file changes)."""
    return _build(_fingerprint(CLIENT_DIR))


def _sources(root: Path) -> list[Path]:
    return sorted(p for p in (root / "src").rglob("*.py") if "__pycache__" not in p.parts)


def _fingerprint(root: Path) -> str:
    digest = hashlib.sha256()
    for path in [root / "pyproject.toml", root / "README.md", *_sources(root)]:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


@lru_cache(maxsize=2)
def _build(fingerprint: str) -> Wheel:
    project = tomllib.loads((CLIENT_DIR / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    name, version = project["name"], project["version"]
    dist = f"{re.sub(r'[-_.]+', '_', name)}-{version}"
    files: dict[str, bytes] = {}
    for path in _sources(CLIENT_DIR):
        files[path.relative_to(CLIENT_DIR / "src").as_posix()] = path.read_bytes()
    files[f"{dist}.dist-info/METADATA"] = _metadata(project, (CLIENT_DIR / "README.md").read_text("utf-8")).encode()
    files[f"{dist}.dist-info/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: kvselect\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    ).encode()
    scripts = project.get("scripts") or {}
    if scripts:
        lines = "".join(f"{command} = {target}\n" for command, target in scripts.items())
        files[f"{dist}.dist-info/entry_points.txt"] = f"[console_scripts]\n{lines}".encode()
    record = "".join(f"{path},sha256={_urlsafe(content)},{len(content)}\n" for path, content in files.items())
    files[f"{dist}.dist-info/RECORD"] = (record + f"{dist}.dist-info/RECORD,,\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path, content in files.items():
            info = zipfile.ZipInfo(path, date_time=EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, content)
    content = buffer.getvalue()
    return Wheel(f"{dist}-py3-none-any.whl", content, hashlib.sha256(content).hexdigest())


def _metadata(project: dict, readme: str) -> str:
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
        f"Summary: {project.get('description', '')}",
        f"Requires-Python: {project.get('requires-python', '>=3.10')}",
    ]
    lines += [f"Requires-Dist: {requirement}" for requirement in project.get("dependencies", [])]
    for extra, requirements in (project.get("optional-dependencies") or {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {requirement}; extra == "{extra}"' for requirement in requirements]
    lines.append("Description-Content-Type: text/markdown")
    return "\n".join(lines) + "\n\n" + readme


def _urlsafe(content: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()
