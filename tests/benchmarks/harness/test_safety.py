import pytest

from benchmarks.harness.safety import TargetRefused, check_target


def fake_resolver(table):
    return lambda host, port: table[host]


def test_allow_listed_host_passes_and_is_normalised():
    assert (
        check_target(
            "http://Engine.Internal:8000/v1", ["engine.internal"], fake_resolver({"engine.internal": ["10.0.0.5"]})
        )
        == "engine.internal"
    )
    assert check_target("https://10.1.2.3/v1", "10.0.0.0/8, other") == "10.1.2.3"
    assert check_target(
        "http://gpu-7.pool.example.com", ["*.pool.example.com"], fake_resolver({"gpu-7.pool.example.com": ["10.0.0.7"]})
    )


def test_host_not_in_list_is_refused_naming_the_setting():
    with pytest.raises(TargetRefused, match="not in KVSELECT_ALLOWED_TARGETS"):
        check_target("http://evil.example.com/v1", ["engine.internal"])
    with pytest.raises(TargetRefused, match="allowed: empty"):
        check_target("http://127.0.0.1:8000", [])


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data",
        "http://169.254.1.1:80",
        "http://[fe80::1]:8000",
        "http://[::ffff:169.254.169.254]/",
        "http://metadata.google.internal/computeMetadata",
    ],
)
def test_link_local_and_metadata_always_refused_even_with_wildcard(url):
    with pytest.raises(TargetRefused, match="always refused"):
        check_target(url, ["*"])


def test_dns_name_resolving_to_link_local_is_refused_before_connecting():
    resolver = fake_resolver({"sneaky.example.com": ["10.0.0.1", "169.254.169.254"]})
    with pytest.raises(TargetRefused, match="resolves to 169.254.169.254"):
        check_target("http://sneaky.example.com", ["sneaky.example.com"], resolver)


def test_bad_scheme_and_credentials_refused():
    with pytest.raises(TargetRefused, match="scheme"):
        check_target("file:///etc/passwd", ["*"])
    with pytest.raises(TargetRefused, match="credentials"):
        check_target("http://user:pw@engine.internal", ["engine.internal"])
    assert issubclass(TargetRefused, ValueError)
