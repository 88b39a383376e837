"""Stint's own Prometheus text format: what a scraper reads back is what was recorded.

prometheus_client's parser (a test dependency, as Prometheus's own reading of
the format) reads every page here; the exact page is pinned once, so a change
of format shows as a diff.
"""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from stint.telemetry.exposition import CONTENT_TYPE, Counter, Family, Histogram, Registry, counter


def _read(registry: Registry) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    found = {}
    for family in text_string_to_metric_families(registry.render().decode()):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def test_the_page_is_the_text_format_line_for_line() -> None:
    registry = Registry()
    claims = Counter("stint_claims_total", "Claim statements run", registry=registry)
    finished = Counter("stint_turns_finished", "Turns finished", ["status"], registry=registry)
    seconds = Histogram(
        "stint_claim_seconds", "Claim latency", buckets=(0.01, 0.1), registry=registry
    )
    registry.register(_Fixed(Family("stint_slots", "Slots", "gauge").add((), 4)))
    claims.inc()
    claims.inc(2)
    finished.labels("succeeded").inc()
    seconds.observe(0.01)  # on a bound: counted in it (le is "less than or equal")
    seconds.observe(0.05)
    seconds.observe(7)
    assert registry.render().decode() == (
        "# HELP stint_claims_total Claim statements run\n"
        "# TYPE stint_claims_total counter\n"
        "stint_claims_total 3.0\n"
        "# HELP stint_turns_finished_total Turns finished\n"
        "# TYPE stint_turns_finished_total counter\n"
        'stint_turns_finished_total{status="succeeded"} 1.0\n'
        "# HELP stint_claim_seconds Claim latency\n"
        "# TYPE stint_claim_seconds histogram\n"
        'stint_claim_seconds_bucket{le="0.01"} 1.0\n'
        'stint_claim_seconds_bucket{le="0.1"} 2.0\n'
        'stint_claim_seconds_bucket{le="+Inf"} 3.0\n'
        "stint_claim_seconds_count 3.0\n"
        "stint_claim_seconds_sum 7.06\n"
        "# HELP stint_slots Slots\n"
        "# TYPE stint_slots gauge\n"
        "stint_slots 4.0\n"
    )
    assert CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"


def test_labels_and_help_with_quotes_backslashes_and_newlines_read_back_as_written() -> None:
    registry = Registry()
    awkward = 'a "quoted"\\path\nand a second line'
    tokens = Counter(
        "stint_model_tokens", "Tokens\\by kind\nper scope", ["scope", "kind"], registry=registry
    )
    latency = Histogram(
        "stint_api_seconds", "Latency", ["route"], buckets=(1.0,), registry=registry
    )
    tokens.labels(awkward, "input").inc(12_345_678)
    latency.labels(awkward).observe(0.5)
    latency.labels("/v1").observe(2.0)
    read = _read(registry)
    assert read[
        ("stint_model_tokens_total", frozenset({("scope", awkward), ("kind", "input")}))
    ] == (12_345_678)
    assert read[("stint_api_seconds_bucket", frozenset({("route", awkward), ("le", "1.0")}))] == 1
    assert read[("stint_api_seconds_bucket", frozenset({("route", "/v1"), ("le", "1.0")}))] == 0
    assert read[("stint_api_seconds_bucket", frozenset({("route", "/v1"), ("le", "+Inf")}))] == 1
    assert read[("stint_api_seconds_sum", frozenset({("route", "/v1")}))] == 2.0
    families = list(text_string_to_metric_families(registry.render().decode()))
    assert families[0].documentation == "Tokens\\by kind\nper scope"


def test_a_labelled_series_appears_once_counted_and_an_unlabelled_one_at_zero() -> None:
    registry = Registry()
    Counter("plain", "An unlabelled counter", registry=registry)
    labelled = Counter("by_status", "A labelled counter", ["status"], registry=registry)
    assert _read(registry) == {("plain_total", frozenset()): 0.0}
    labelled.labels("failed")
    assert _read(registry)[("by_status_total", frozenset({("status", "failed")}))] == 0.0


def test_collected_families_are_built_at_each_scrape() -> None:
    registry = Registry()
    reading = [1.0]

    class Reader:
        def collect(self) -> list[Family]:
            books = Family("quota_requests", "Requests", "counter", ("scope", "state"))
            books.add(("openai", "settled"), reading[0])
            return [books, counter("batches_total", "Batches", reading[0] * 2)]

    registry.register(Reader())
    assert _read(registry)[("batches_total", frozenset())] == 2.0
    reading[0] = 5.0
    read = _read(registry)
    assert (
        read[("quota_requests_total", frozenset({("scope", "openai"), ("state", "settled")}))] == 5
    )
    assert read[("batches_total", frozenset())] == 10.0


@pytest.mark.parametrize(
    ("value", "written"),
    [
        (0, "0.0"),
        (0.025, "0.025"),
        (123456.5, "123456.5"),
        (1234567.0, "1.234567e+06"),
        (12345678.0, "1.2345678e+07"),
        (1e16, "1e+16"),
        (-12345678.0, "-12345678.0"),
        (math.inf, "+Inf"),
        (-math.inf, "-Inf"),
        (math.nan, "NaN"),
    ],
)
def test_values_are_written_as_prometheus_writes_them(value: float, written: str) -> None:
    registry = Registry()
    registry.register(_Fixed(Family("figure", "A figure", "gauge").add((), value)))
    assert registry.render().decode().splitlines()[-1] == f"figure {written}"


def test_misuse_is_refused_where_it_happens() -> None:
    registry = Registry()
    plain = Counter("plain", "Plain", registry=registry)
    labelled = Counter("labelled", "Labelled", ["status"], registry=registry)
    timed = Histogram("timed", "Timed", ["route"], buckets=(1.0,), registry=registry)
    with pytest.raises(ValueError, match="only goes up"):
        plain.inc(-1)
    with pytest.raises(ValueError, match="has labels"):
        labelled.inc()
    with pytest.raises(ValueError, match="has labels"):
        timed.observe(1.0)
    with pytest.raises(ValueError, match="1 label values for labels"):
        Counter("two", "Two", ["a", "b"], registry=registry).labels("x")
    with pytest.raises(ValueError, match="not a metric name"):
        Counter("stint-claims", "Dash", registry=registry)
    with pytest.raises(ValueError, match="not a label name"):
        Counter("ok", "Reserved label", ["__name"], registry=registry)
    with pytest.raises(ValueError, match="buckets' own label"):
        Histogram("h", "H", ["le"], buckets=(1.0,), registry=registry)
    with pytest.raises(TypeError, match="histogram"):
        Family("h", "H", "histogram").add((), 1.0)
    assert _read(registry)[("plain_total", frozenset())] == 0.0  # nothing half-counted


class _Fixed:
    def __init__(self, family: Family) -> None:
        self._family = family

    def collect(self) -> list[Family]:
        return [self._family]


def test_label_values_are_their_text_so_one_value_is_one_series() -> None:
    registry = Registry()
    calls = Counter("calls", "Calls", ["code"], registry=registry)
    timed = Histogram("timed", "Timed", ["code"], buckets=(1.0,), registry=registry)
    calls.labels(200).inc()  # type: ignore[arg-type]  # a caller passing a number
    calls.labels("200").inc()
    timed.labels(200).observe(0.5)  # type: ignore[arg-type]
    timed.labels("200").observe(0.5)
    read = _read(registry)
    assert read[("calls_total", frozenset({("code", "200")}))] == 2.0
    assert read[("timed_count", frozenset({("code", "200")}))] == 2.0
    assert registry.render().decode().count('calls_total{code="200"}') == 1
