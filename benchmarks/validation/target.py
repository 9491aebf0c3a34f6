"""The candidate's endpoint as a load target: the outbound allow-list check, the probes (is it
up? is it kvselect's simulator?) and its documented cache model; the harness `Target` built from it
is `loadtest`'s (the one module of the validation app that loads the load generator)."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Mapping
from urllib.parse import urljoin

from django.conf import settings

from benchmarks.harness import safety
from benchmarks.harness.cache_model import CacheModel
from selection.domain import catalog as catalog_domain
from selection.domain import launch_flags
from selection.domain.messages import Message
from selection.models import Candidate


class ValidationError(ValueError):
    """A run that cannot start; the message begins with the field at fault ("endpoint_url: ...")."""


def check_candidate_target(candidate: Candidate) -> None:
    """Refuse endpoints outside KVSELECT_ALLOWED_TARGETS (and link-local/metadata) before any connection."""
    if not candidate.endpoint_url:
        raise ValidationError("endpoint_url: the candidate has no endpoint to test")
    refused = refused_urls(candidate_urls(candidate))
    for field, reason in refused.items():
        raise ValidationError(f"{field}: {reason}")


def candidate_urls(candidate: Candidate) -> dict[str, str]:
    """field -> URL of every endpoint a run may load or scrape (the prefix-caching-off one too)."""
    return {
        "endpoint_url": candidate.endpoint_url,
        "metrics_url": candidate.metrics_url,
        "prefix_off_endpoint_url": candidate.prefix_off_endpoint_url,
        "prefix_off_metrics_url": candidate.prefix_off_metrics_url,
    }


def refused_urls(urls: Mapping[str, str], resolver: safety.Resolver | None = None) -> dict[str, Message]:
    """field -> why (the refusal's message: str() is its English), for each URL the outbound allow-list
    refuses (the rule the worker applies before any connection); empty URLs pass. `resolver` replaces
    the DNS lookup (see `lenient_resolver`)."""
    refused = {}
    for field, url in urls.items():
        if url:
            try:
                safety.check_target(url, settings.KVSELECT_ALLOWED_TARGETS, resolver=resolver)
            except safety.TargetRefused as exc:
                refused[field] = exc.reason
    return refused


def outbound(url: str | urllib.request.Request, timeout: float):
    """urlopen through the outbound guard with the configured allow-list (`safety.urlopen`): the one
    way kvselect's server and worker open a connection to an engine's URL outside the load harness."""
    return safety.urlopen(url, settings.KVSELECT_ALLOWED_TARGETS, timeout=timeout)


def lenient_resolver(host: str, port: int) -> list[str]:
    """DNS for a check at save time: a name that resolves to a forbidden address is refused, a name
    this server cannot resolve (yet) passes; the worker resolves again before each run."""
    try:
        return safety.resolve(host, port)
    except OSError:
        return []


ENGINE_SLUGS = {
    "vllm": "vllm",
    "sglang": "sglang",
    "lmdeploy": "lmdeploy",
    "tgi": "tgi",
    "tensorrt-llm": "trtllm",
    "llama-cpp": "llamacpp",
    "simulator": "simulator",
}


def cache_model_for(candidate: Candidate) -> CacheModel | None:
    """The candidate's documented cache model (the engine catalog's, with its source) as its launch
    flags deploy it: an offload tier counts only when the flags enable it. None for an engine the
    catalog does not describe (the verdicts then judge every behaviour as observed)."""
    version = candidate.engine_version if candidate.engine_version in candidate.engine.versions else None
    flags = f"{candidate.launch_flags or ''} {candidate.launch_recipe or ''}".strip()
    return documented_cache_model(candidate.engine.slug, version, flags, candidate.engine.name)


def documented_cache_model(slug: str, version: str | None, flags: str = "", name: str = "") -> CacheModel | None:
    """The catalog's cache model of an engine version (its newest when `version` is None) as `flags`
    deploy it; None when the catalog has no such engine or states no cache model."""
    try:
        caps = catalog_domain.capabilities(slug, version)
        name = name or catalog_domain.engine(slug).name
    except catalog_domain.CatalogError:
        return None
    if not caps.get("cache_model_kind"):
        return None
    deployed = launch_flags.apply_to_capabilities(caps, slug, flags)
    return CacheModel(
        kind=caps["cache_model_kind"],
        offload=bool(deployed.get("offload_tiers")),
        source=caps["sources"].get("cache_model_kind"),
        engine=name,
    )


CATALOG_SLUGS = {harness: slug for slug, harness in ENGINE_SLUGS.items()}  # the harness's engine name -> catalog


def is_simulator(url: str) -> bool:
    """True when the endpoint is kvselect's simulator (its /metrics carries kvsim_info); asked through
    the outbound guard (a refused target is not asked, and is not the simulator)."""
    try:
        with outbound(urljoin(url.rstrip("/") + "/", "/metrics"), timeout=3) as response:
            return b"kvsim_info" in response.read(2_000_000)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def healthy(url: str) -> bool:
    """True when the engine answers. A 5xx from /health is final: a crashed engine may still list its
    models. /v1/models is asked only when /health is missing (404) or unreachable. Asked through the
    outbound guard: a refused target is not healthy."""
    for path in ("/health", "/v1/models"):
        try:
            with outbound(urljoin(url.rstrip("/") + "/", path), timeout=3) as response:
                if response.status < 500:
                    return True
        except urllib.error.HTTPError as exc:
            if exc.code >= 500:
                return False
            if not (exc.code == 404 and path == "/health"):
                return True
        except (urllib.error.URLError, OSError, ValueError):
            continue
    return False
