"""Telemetry at one seam, for every Stint process: the names of every span,
attribute and metric (``names``), the per-process Prometheus registry and its
metric families (``metrics``), and OpenTelemetry tracing with W3C trace
context (``tracing``). Nothing here imports another Stint package, so the
worker, the API and the CLI all share these names; the metric families (with
``exposition``, the counting and the text format) and the OpenTelemetry SDK are
imported only by a process that turns them on."""
