"""Metrics the request path updates: plain numbers changed on the event loop, read by Prometheus at scrape time.

prometheus_client's own metrics take a lock and check their state on every update, and a
histogram observation walks its buckets in Python: a few microseconds each, about ten times per
request. The families here hold plain numbers instead. They are updated and collected on the
router's event loop thread only (the admin port is served on the same loop), so they need no
lock, and they export the same samples as prometheus_client's Counter, Gauge and Histogram:
``_total`` and ``_created`` of a counter, ``_bucket``/``_count``/``_sum``/``_created`` of a histogram.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar, cast

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

#: How Prometheus writes a bucket bound (``+Inf``, Go's exponent notation).
_bound_text = cast(Callable[[float], str], floatToGoString)


class CounterValue:
    """One counter series."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("counters can only be incremented by non-negative amounts")
        self.value += amount


class GaugeValue:
    """One gauge series."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def set(self, value: float) -> None:
        self.value = float(value)


class HistogramValue:
    """One histogram series: a count per bucket (not cumulative) and the sum of observations."""

    __slots__ = ("bounds", "counts", "created", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, amount: float) -> None:
        # the first bucket whose upper bound is >= amount (the last bound is +Inf)
        self.counts[bisect.bisect_left(self.bounds, amount)] += 1
        self.sum += amount


ValueT = TypeVar("ValueT", CounterValue, GaugeValue, HistogramValue)


class _Family(Collector, Generic[ValueT]):
    """A metric name, its label names, and one series per label values; a Prometheus collector."""

    kind = ""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        registry: CollectorRegistry,
        make: Callable[[], ValueT],
    ) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, tuple(labelnames)
        self._make: Callable[[], ValueT] = make
        self._series: dict[tuple[str, ...], ValueT] = {}
        if not self.labelnames:
            self._series[()] = make()
        registry.register(self)

    def labels(self, *values: str) -> ValueT:
        """The series of ``values`` (one per label name), created on first use."""
        series = self._series.get(values)
        if series is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name}: expected {len(self.labelnames)} label values")
            series = self._series[values] = self._make()
        return series

    def remove(self, *values: str) -> None:
        """Drop the series of ``values`` (no error if there is none)."""
        self._series.pop(values, None)

    def describe(self) -> list[Metric]:
        return [Metric(self.name, self.documentation, self.kind)]

    def collect(self) -> list[Metric]:
        metric = Metric(self.name, self.documentation, self.kind)
        for values, series in list(self._series.items()):
            self._add_samples(metric, dict(zip(self.labelnames, values, strict=True)), series)
        return [metric]

    def _add_samples(self, metric: Metric, labels: dict[str, str], series: ValueT) -> None:
        raise NotImplementedError


class LoopCounter(_Family[CounterValue]):
    kind = "counter"

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], registry: CollectorRegistry) -> None:
        super().__init__(name, documentation, labelnames, registry, CounterValue)

    def _add_samples(self, metric: Metric, labels: dict[str, str], series: CounterValue) -> None:
        metric.add_sample(self.name + "_total", labels, series.value)
        metric.add_sample(self.name + "_created", labels, series.created)


class LoopGauge(_Family[GaugeValue]):
    kind = "gauge"

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], registry: CollectorRegistry) -> None:
        super().__init__(name, documentation, labelnames, registry, GaugeValue)

    def _add_samples(self, metric: Metric, labels: dict[str, str], series: GaugeValue) -> None:
        metric.add_sample(self.name, labels, series.value)


class LoopHistogram(_Family[HistogramValue]):
    kind = "histogram"

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        registry: CollectorRegistry,
        buckets: Sequence[float],
    ) -> None:
        bounds = tuple(sorted(float(bound) for bound in buckets))
        if not bounds or bounds[-1] != math.inf:
            bounds += (math.inf,)
        self.bounds = bounds
        self._le = tuple(_bound_text(bound) for bound in bounds)
        super().__init__(name, documentation, labelnames, registry, lambda: HistogramValue(bounds))

    def _add_samples(self, metric: Metric, labels: dict[str, str], series: HistogramValue) -> None:
        cumulative = 0
        for le, count in zip(self._le, series.counts, strict=True):
            cumulative += count
            metric.add_sample(self.name + "_bucket", {**labels, "le": le}, float(cumulative))
        metric.add_sample(self.name + "_count", labels, float(cumulative))
        metric.add_sample(self.name + "_sum", labels, series.sum)
        metric.add_sample(self.name + "_created", labels, series.created)
