"""What operators watch the broker with: traces (OpenTelemetry, opt-in) and Prometheus metrics.

``settings`` reads ``[telemetry]`` (standard library only, so the config
loader can use it cold); ``traces`` installs the OpenTelemetry SDK behind
``broker.vocab.tracing`` and is imported only when ``otlp_endpoint`` is set;
``metrics`` (the counters and histograms), ``labels`` (bounded label values)
and ``scrape`` (the gauges a scrape reads from the store) build ``/metrics``
with ``prometheus_client``. Imports only ``broker.vocab`` and those libraries:
the core, the daemon and the CLI call it, never the other way round.
"""
