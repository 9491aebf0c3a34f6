"""Owners' signing certificates: enrol one (upload the public certificate, or have the configured
CA issue one), and read the current one. The key never reaches kvselect's database.

An enrolled certificate must be certified for signing by a configured trust root, not be revoked by
a configured CRL, be valid now, not be a CA, not be an organisational seal certificate, and not be
another user's current certificate. Each user has one current
certificate; enrolling another replaces it (the old row stays, with ``replaced_at``). Signing
refuses any other certificate, and a record's snapshot names each owner's at review time.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from selection.audit import audit
from selection.certificates import signing
from selection.certificates.trust import certification_refusal, issuing_ca_dir, seal_certificates
from selection.i18n import person_name
from selection.models import Selection, SigningCertificate

OWNER_FIELDS = ("business_owner", "platform_owner", "security_owner")


def current_certificate(user) -> SigningCertificate | None:
    if user is None or not user.pk:
        return None
    return SigningCertificate.objects.filter(user=user, replaced_at__isnull=True).first()


def _checked(data: bytes) -> tuple[signing.CertificateInfo, signing.CertificateInfo]:
    """The certificate's facts and the trust root that certifies it; a ValidationError naming ``certificate``."""
    try:
        info = signing.certificate_info(data)
        chain = signing.bundle_certificates(data)
    except signing.SigningError as exc:
        raise ValidationError({"certificate": str(exc).removeprefix("certificate: ")}) from exc
    now = timezone.now()
    if info.is_ca:
        raise ValidationError({"certificate": "this is a CA certificate: enrol your own signing certificate"})
    if info.not_after <= now:
        raise ValidationError({"certificate": f"expired on {info.not_after:%Y-%m-%d}"})
    if info.not_before > now:
        raise ValidationError({"certificate": f"not valid before {info.not_before:%Y-%m-%d %H:%M} UTC"})
    if info.sha256 in {signing.certificate_info(seal).sha256 for seal in seal_certificates()}:
        raise ValidationError(
            {"certificate": "this is an organisational seal certificate (KVSELECT_SEAL_CERTIFICATES), not a person's"}
        )
    root, refusal = certification_refusal(chain[0], chain[1:])
    if root is None:
        raise ValidationError({"certificate": refusal})
    return info, root


def _enrol(user, info: signing.CertificateInfo, root: signing.CertificateInfo, source: str) -> SigningCertificate:
    current = SigningCertificate.objects.select_for_update().filter(user=user, replaced_at__isnull=True).first()
    if current is not None and current.sha256 == info.sha256:
        return current
    if SigningCertificate.objects.filter(sha256=info.sha256, replaced_at__isnull=True).exclude(user=user).exists():
        raise ValidationError({"certificate": "this certificate is another user's enrolled certificate"})
    now = timezone.now()
    if current is not None:
        current.replaced_at = now
        current.save(update_fields=["replaced_at"])
    enrolled = SigningCertificate.objects.create(
        user=user,
        sha256=info.sha256,
        certificate_pem=info.pem,
        subject=info.subject[:500],
        common_name=info.common_name[:200],
        issuer=info.issuer[:500],
        trust_root=(root.common_name or root.subject)[:200],
        not_before=info.not_before,
        not_after=info.not_after,
        development=info.development or root.development,
        source=source,
    )
    change = {
        "sha256": info.sha256,
        "subject": info.subject,
        "trust_root": enrolled.trust_root,
        "development": enrolled.development,
        "source": source,
    }
    query = Q()
    for name in OWNER_FIELDS:
        query |= Q(**{name: user})
    for selection in Selection.objects.filter(query):
        audit(
            selection,
            user,
            "owner.certificate_enrolled",
            field=person_name(user),
            old={"sha256": current.sha256} if current else None,
            new=change,
        )
    return enrolled


@transaction.atomic
def enrol_certificate(*, user, certificate: bytes) -> SigningCertificate:
    """Enrol an uploaded public certificate (PEM, optionally followed by its intermediates, or DER)."""
    info, root = _checked(certificate)
    return _enrol(user, info, root, SigningCertificate.Source.UPLOADED)


@transaction.atomic
def issue_certificate(*, user, passphrase: str) -> tuple[bytes, SigningCertificate]:
    """A new key and certificate from the configured CA, enrolled; the PKCS#12 is returned once, never stored."""
    folder = issuing_ca_dir()
    if folder is None:
        raise ValidationError(
            {"__all__": "No certificate authority here can issue certificates: upload your certificate instead."}
        )
    try:
        blob, info = signing.issue_certificate(folder, person_name(user), passphrase)
    except signing.SigningError as exc:
        field, _, message = str(exc).partition(": ")
        raise ValidationError({field if field == "passphrase" else "__all__": message or str(exc)}) from exc
    _info, root = _checked(info.pem.encode())
    return blob, _enrol(user, info, root, SigningCertificate.Source.ISSUED)
