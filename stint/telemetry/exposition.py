"""Counters, gauges and histograms, and the Prometheus text format they are scraped in.

Written here rather than imported: prometheus_client's package imports its
HTTP servers (``http.server``, ``wsgiref``, ``urllib.request``) and its process,
platform and GC collectors whatever one uses of it, 2.8 MiB of a worker's
resident memory (``python -m stint.lab.import_cost``) to count a dozen things.
What Stint needs is small: counters and histograms recorded as things happen,
families built at scrape time by collectors, and the text exposition format
0.0.4 (https://prometheus.io/docs/instrumenting/exposition_formats/).

The output is what prometheus_client wrote for the same families, line for line
(``# HELP``, ``# TYPE``, a counter's ``_total``, a histogram's cumulative
``_bucket`` lines with ``le``, then ``_count`` and ``_sum``, labels sorted by
name, the same escaping), except that counters and histograms carry no
``_created`` series: Prometheus notices a counter's reset from its value going
down, and the series doubled the page.

Recording is not locked: every series is written from one thread, the event
loop of the process that owns the registry (the worker's or the API's), and a
scrape renders on that same loop.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

__all__ = [
    "CONTENT_TYPE",
    "Collector",
    "Counter",
    "Family",
    "Histogram",
    "Registry",
]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

Kind = Literal["counter", "gauge", "histogram"]
Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Sample:
    """One line of the page: a series' full name, its labels and its value."""

    name: str
    labels: Labels
    value: float


@dataclass
class Family:
    """One metric family as a scrape sees it: ``name`` without a counter's
    ``_total``, its help text, its type, and its samples. Collectors build
    these at scrape time with ``add``; ``Counter`` and ``Histogram`` build them
    from what they recorded."""

    name: str
    doc: str
    kind: Kind
    label_names: tuple[str, ...] = ()
    samples: list[Sample] = field(default_factory=list)

    def __post_init__(self) -> None:
        _check_names(self.name, self.label_names)

    def add(self, label_values: Sequence[str], value: float) -> Family:
        """A sample of this counter or gauge family (one value per label name)."""
        if self.kind == "histogram":
            raise TypeError(f"{self.name}: a histogram's samples come from Histogram")
        self.samples.append(Sample(self.sample_name, self.label_pairs(label_values), value))
        return self

    @property
    def sample_name(self) -> str:
        return f"{self.name}_total" if self.kind == "counter" else self.name

    def label_pairs(self, values: Sequence[str]) -> Labels:
        """Each label name with its value; the wrong number of values is an error."""
        if len(values) != len(self.label_names):
            raise ValueError(
                f"{self.name}: {len(values)} label values for labels {list(self.label_names)}"
            )
        return tuple(zip(self.label_names, (str(value) for value in values), strict=True))


def counter(name: str, doc: str, value: float) -> Family:
    """A counter family of one unlabelled sample (``name`` may end in ``_total``)."""
    return Family(name.removesuffix("_total"), doc, "counter").add((), value)


def gauge(name: str, doc: str, value: float) -> Family:
    """A gauge family of one unlabelled sample."""
    return Family(name, doc, "gauge").add((), value)


class Collector(Protocol):
    """Anything a registry asks for families at each scrape."""

    def collect(self) -> Iterable[Family]: ...


class Registry:
    """The families one process exports, in the order they were registered."""

    def __init__(self) -> None:
        self._collectors: list[Collector] = []

    def register(self, collector: Collector) -> None:
        self._collectors.append(collector)

    def collect(self) -> Iterator[Family]:
        for collector in self._collectors:
            yield from collector.collect()

    def render(self) -> bytes:
        """The page in the text format (``CONTENT_TYPE``)."""
        lines: list[str] = []
        for family in self.collect():
            shown = family.sample_name if family.kind == "counter" else family.name
            lines.append(f"# HELP {shown} {_escape_help(family.doc)}\n")
            lines.append(f"# TYPE {shown} {family.kind}\n")
            lines.extend(_sample_line(sample) for sample in family.samples)
        return "".join(lines).encode()


class Counter:
    """A counter recorded as things happen, with or without labels
    (``counter.inc()``, ``counter.labels("a").inc(2)``)."""

    def __init__(
        self, name: str, doc: str, label_names: Sequence[str] = (), *, registry: Registry
    ) -> None:
        self._family = Family(name.removesuffix("_total"), doc, "counter", tuple(label_names))
        self._values: dict[tuple[str, ...], float] = {} if label_names else {(): 0.0}
        self._child: dict[tuple[str, ...], _CounterChild] = {}
        registry.register(self)

    def labels(self, *values: str) -> _CounterChild:
        child = self._child.get(values)
        if child is None:
            key = _label_values(self._family, values)
            self._values.setdefault(key, 0.0)
            child = self._child[values] = _CounterChild(self._values, key)
        return child

    def inc(self, amount: float = 1.0) -> None:
        if self._family.label_names:
            raise ValueError(f"{self._family.name} has labels: count through labels(...)")
        _add(self._values, (), amount)

    def collect(self) -> Iterator[Family]:
        family = Family(self._family.name, self._family.doc, "counter", self._family.label_names)
        for values, value in self._values.items():
            family.add(values, value)
        yield family


class _CounterChild:
    __slots__ = ("_key", "_values")

    def __init__(self, values: dict[tuple[str, ...], float], key: tuple[str, ...]) -> None:
        self._values = values
        self._key = key

    def inc(self, amount: float = 1.0) -> None:
        _add(self._values, self._key, amount)


def _add(values: dict[tuple[str, ...], float], key: tuple[str, ...], amount: float) -> None:
    if amount < 0:
        raise ValueError(f"a counter only goes up, not by {amount}")
    values[key] += amount


class Histogram:
    """A histogram of observations in fixed buckets (upper bounds, ``+Inf`` added),
    with or without labels."""

    def __init__(
        self,
        name: str,
        doc: str,
        label_names: Sequence[str] = (),
        *,
        buckets: Sequence[float],
        registry: Registry,
    ) -> None:
        bounds = sorted(float(bound) for bound in buckets)
        if not bounds or any(math.isnan(bound) for bound in bounds):
            raise ValueError(f"{name}: buckets must be numbers, at least one")
        if "le" in label_names:
            raise ValueError(f"{name}: 'le' is the buckets' own label")
        if bounds[-1] != math.inf:
            bounds.append(math.inf)
        self._family = Family(name, doc, "histogram", tuple(label_names))
        self._bounds = tuple(bounds)
        self._series: dict[tuple[str, ...], _Series] = {}
        if not label_names:
            self._series[()] = _Series(self._bounds)
        registry.register(self)

    def labels(self, *values: str) -> _Series:
        series = self._series.get(values)
        if series is None:
            key = _label_values(self._family, values)
            series = self._series.setdefault(key, _Series(self._bounds))
        return series

    def observe(self, value: float) -> None:
        if self._family.label_names:
            raise ValueError(f"{self._family.name} has labels: observe through labels(...)")
        self._series[()].observe(value)

    def collect(self) -> Iterator[Family]:
        family = Family(self._family.name, self._family.doc, "histogram", self._family.label_names)
        name = family.name
        for values, series in self._series.items():
            labels = family.label_pairs(values)
            cumulative = 0
            for bound, count in zip(self._bounds, series.counts, strict=True):
                cumulative += count
                le = (*labels, ("le", _number(bound)))
                family.samples.append(Sample(f"{name}_bucket", le, cumulative))
            family.samples.append(Sample(f"{name}_count", labels, cumulative))
            family.samples.append(Sample(f"{name}_sum", labels, series.total))
        yield family


class _Series:
    """One histogram series: a count per bucket (not cumulative) and the sum."""

    __slots__ = ("_bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0] * len(bounds)
        self.total = 0.0

    def observe(self, value: float) -> None:
        # the first bucket whose upper bound is >= value (le: "less than or equal")
        self.counts[bisect.bisect_left(self._bounds, value)] += 1
        self.total += value


def _label_values(family: Family, values: tuple[object, ...]) -> tuple[str, ...]:
    """The values as the text they are written as (so ``1`` and ``"1"`` are one
    series), one per label name, or an error."""
    text = tuple(str(value) for value in values)
    family.label_pairs(text)
    return text


def _check_names(name: str, label_names: Sequence[str]) -> None:
    if not _NAME.fullmatch(name):
        raise ValueError(f"not a metric name: {name!r}")
    for label in label_names:
        if not _LABEL.fullmatch(label) or label.startswith("__"):
            raise ValueError(f"{name}: not a label name: {label!r}")
    if len(set(label_names)) != len(label_names):
        raise ValueError(f"{name}: a label named twice in {list(label_names)}")


def _sample_line(sample: Sample) -> str:
    if sample.labels:
        pairs = ",".join(f'{k}="{_escape_label(v)}"' for k, v in sorted(sample.labels))
        return f"{sample.name}{{{pairs}}} {_number(sample.value)}\n"
    return f"{sample.name} {_number(sample.value)}\n"


def _number(value: float) -> str:
    """A value as Prometheus writes it: ``+Inf``, ``-Inf``, ``NaN``, else the
    shortest form that reads back the same (``1.0``, ``0.025``), with an exponent
    past six integer digits as Go's (``1.2345678e+07``, where Python writes
    ``12345678.0``)."""
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    text = repr(value)
    dot = text.find(".")
    if value > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0").rstrip(".")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
