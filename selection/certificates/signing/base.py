"""What every part of signing shares: the development names, the seal's field, what may follow a
signature, a signature box, the digest algorithm, `SigningError`. It imports no pyHanko, so `SigningError`
costs nothing to import."""

from __future__ import annotations

from typing import Any

from selection.domain.messages import Message

DEV_CA_COMMON_NAME = "kvselect DEVELOPMENT CA \u2014 not for production"
DEV_TSA_COMMON_NAME = "kvselect DEVELOPMENT TSA \u2014 not for production"
DEV_ORGANISATION = "kvselect development (not for production)"
SEAL_FIELD = "seal"  # the organisational seal's field: signed last, by a configured seal certificate
# What may be appended after a signature without voiding it (pyHanko ModificationLevel names): later
# signatures after any but the last; after the last, only validation data and document timestamps.
ALLOWED_LATER_CHANGES = ("NONE", "LTA_UPDATES", "FORM_FILLING")
ALLOWED_AFTER_LAST = ("NONE", "LTA_UPDATES")
# A box is (page index starting at 0, x1, y1, x2, y2) in PDF points, origin bottom-left.
Box = tuple[int, float, float, float, float]
# The digest of every signature (the owner-side signed attributes and the timestamps).
MD_ALGORITHM = "sha256"


class SigningError(ValueError):
    """Signing or certificate handling failed; the text says which input and why ("cms: ...").

    A refusal an owner reads that carries figures (digests, a subject, a count) also has `message`: the
    same sentence without its input's prefix as a `Message` (a msgid and its params), so a page shows it
    in the owner's language with the figures unchanged (walk m11). The text stays the English sentence."""

    def __init__(self, text: str, message: Message | None = None):
        super().__init__(text)
        self.message = message


def refusal(where: str, msgid: str, /, **params: Any) -> SigningError:
    """A SigningError for the input `where` whose sentence is `msgid` filled with `params`, also kept as a
    `Message` (a digest, subject or count is a param: it stays as written in any language)."""
    message = Message(msgid, params)
    return SigningError(f"{where}: {message}", message)
