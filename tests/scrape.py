"""Read a Prometheus /metrics page (tests only): sample name + labels -> value."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import httpx
from prometheus_client.parser import text_string_to_metric_families

from stint.lab.free_port import free_port as free_port  # one choice of port for every test

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


async def scrape(url: str, *, headers: Mapping[str, str] | None = None) -> Samples | None:
    """The page's samples; None when nothing answers (yet)."""
    try:
        async with httpx.AsyncClient(timeout=10) as client:
            response = await client.get(url, headers=dict(headers or {}))
    except httpx.TransportError:
        return None
    if response.status_code != 200:
        return None
    return parse(response.text)


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def total(pages: Iterable[Samples], name: str, **labels: str) -> float:
    """The sum over workers of one series (absent counts as 0)."""
    return sum(value(page, name, **labels) or 0.0 for page in pages)


def by_label(pages: Iterable[Samples], name: str, label: str) -> dict[str, float]:
    """The sum over workers of a family, per value of ``label`` (zeros left out)."""
    sums: dict[str, float] = {}
    for page in pages:
        for (sample, labels), amount in page.items():
            if sample == name and amount:
                key = dict(labels)[label]
                sums[key] = sums.get(key, 0.0) + amount
    return sums
