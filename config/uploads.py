"""Uploads when the server's storage fails: a read-only or full media volume is a 507 that names the
problem, for any upload size, on pages and in the API, and leaves nothing on disk or held open.

A large request body is spooled to FILE_UPLOAD_TEMP_DIR (beside MEDIA_ROOT) while Django parses the
multipart body, before any view runs. `SpoolingUploadHandler` is Django's temporary-file handler that,
when the disk refuses a write, closes and removes its partial file at once and raises
`UploadSpoolFailure`; `config.errors` (pages) and `config.api_errors` (the API) answer 507. Before, that
was a 500 HTML page, and on a full disk the partial file stayed on disk, held open by the web worker,
until the worker restarted.
"""

from __future__ import annotations

import errno
import logging
import os

from django.core.files.uploadhandler import TemporaryFileUploadHandler
from django.utils.translation import gettext as _

logger = logging.getLogger(__name__)


class UploadSpoolFailure(Exception):
    """The server could not write an upload to its disk (full, read-only, no permission): nothing was stored."""

    def __init__(self, error: OSError) -> None:
        self.error = error
        super().__init__(f"could not store the upload: {error.strerror or error}")


def storage_problem(error: OSError | None) -> str:
    """What is wrong with the server's storage, in the reader's language."""
    code = getattr(error, "errno", None)
    if code == errno.ENOSPC:
        return _("the server's storage is full")
    if code == errno.EROFS:
        return _("the server's storage is read-only")
    if code in (errno.EACCES, errno.EPERM):
        return _("the server is not allowed to write to its storage")
    if code == errno.EDQUOT:
        return _("the server's storage quota is used up")
    return _("the server's storage refused the write (%(error)s)") % {
        "error": getattr(error, "strerror", None) or error
    }


def storage_detail(error: OSError | None) -> str:
    """The API's 507 body: the problem in words and the system's own message (English, for operators)."""
    reason = getattr(error, "strerror", None) or str(error)
    return (
        f"Could not store the upload: {reason} (the server's upload storage is full or read-only); nothing was "
        "stored. Retry later with the same Idempotency-Key, and tell the administrator if it keeps failing."
    )


class SpoolingUploadHandler(TemporaryFileUploadHandler):
    """Django's temporary-file upload handler, with its partial file closed and removed on a failed write."""

    def new_file(self, *args, **kwargs) -> None:
        try:
            super().new_file(*args, **kwargs)
        except OSError as exc:  # the directory is read-only or gone: no file was created
            self.fail(exc)

    def receive_data_chunk(self, raw_data: bytes, start: int) -> None:
        try:
            self.file.write(raw_data)
        except OSError as exc:  # disk full half-way: the partial file must not stay (nor stay open)
            self.fail(exc)

    def file_complete(self, file_size: int):
        try:
            self.file.flush()
        except OSError as exc:
            self.fail(exc)
        return super().file_complete(file_size)

    def fail(self, error: OSError) -> None:
        """Remove the partial file, read the rest of the body (bounded by the request-size limit) so that
        the client, still sending, gets the 507 rather than a connection reset, and raise."""
        self.discard()
        drain(self.request)
        raise UploadSpoolFailure(error) from error

    def discard(self) -> None:
        """Close and remove the partial temporary file (it is deleted on close; removed again in case)."""
        handle = getattr(self, "file", None)
        if handle is None:
            return
        path = handle.temporary_file_path()
        try:
            handle.close()
        except OSError:  # the buffered tail cannot be flushed to a full disk: the file is closed anyway
            pass
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            logger.warning("could not remove the partial upload %s: %s", path, exc)


def drain(request, chunk: int = 1024 * 1024) -> None:
    """Read and drop what is left of a request body (its Content-Length, capped by the size limit)."""
    try:
        while request.read(chunk):
            pass
    except OSError:  # the client went away: nothing left to answer
        pass
