"""Certificate checks run from synchronous code also where an event loop is running (an ASGI server,
a browser-driven test): asyncio.run() refuses there, and the check silently said "not certified"."""

import asyncio

from selection.certificates.signing import issue_dev_certificates, pkcs12_certificate, trust_root_of


def test_a_trust_root_is_found_also_from_a_thread_with_a_running_event_loop(tmp_path):
    certs = issue_dev_certificates(tmp_path / "certs", {"business": "Ann Lee"}, "pw-Long-123")
    pem = pkcs12_certificate(certs.pkcs12["business"].read_bytes(), "pw-Long-123").pem.encode()
    roots = [certs.ca_certificate.read_bytes()]
    assert trust_root_of(pem, roots) is not None

    async def inside_a_running_loop():
        return trust_root_of(pem, roots)

    assert asyncio.run(inside_a_running_loop()) is not None
