"""Who signs a decision record: the owner roles and the organisational seal, with their labels.

The one place a role is named in words. The English label goes into the signed PDF (signature
reason, stamp, development certificates); pages and the record translate it with gettext
(`selection.i18n.role_name`). No Django here.
"""

from __future__ import annotations

from selection.domain.messages import marked as _

ROLE_LABELS: dict[str, str] = {
    "business": _("Business owner"),
    "platform": _("Platform owner"),
    "security": _("Security owner"),
    "seal": _("Organisational seal"),
}
