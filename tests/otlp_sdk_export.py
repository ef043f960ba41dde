#!/usr/bin/env python3
"""Exports metrics with the official OpenTelemetry Python SDK to an OTLP
endpoint, or sends hand-built OTLP requests, and prints what came back.

usage:
  otlp_sdk_export.py sdk grpc|http ENDPOINT cumulative|delta SERVICE
      Two rounds of measurements through the SDK's own OTLP exporter
      (gRPC or HTTP/protobuf), flushed after each round:
        counter  llm.tokens {token}        5, then 7 (model=m)
        updown   queue.depth               3, then -1
        histogram llm.request.duration s  bounds [0.1, 1, 10]: 0.05 0.5, then 5 50
        gauge    gpu.utilization 1         0.75 (gpu=0)
      Prints {"ok": [result of each export]}.
  otlp_sdk_export.py raw URL
      POSTs requests built with opentelemetry-proto: one with an
      exponential histogram (2 points) and a gauge, as protobuf and as JSON;
      one with an unsupported content type. Prints the status codes, content
      types and partial successes.
"""
import json
import time
import sys


def sdk(protocol, endpoint, temporality, service):
    from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider, UpDownCounter
    from opentelemetry.sdk.metrics.export import AggregationTemporality, MetricExportResult, PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource

    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        kw = {"endpoint": endpoint, "insecure": True}
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        kw = {"endpoint": endpoint}
    if temporality == "delta":
        kw["preferred_temporality"] = {
            Counter: AggregationTemporality.DELTA,
            UpDownCounter: AggregationTemporality.DELTA,
            Histogram: AggregationTemporality.DELTA,
        }
    results = []

    class Recording(OTLPMetricExporter):
        def export(self, metrics_data, timeout_millis=10_000, **kwargs):
            r = super().export(metrics_data, timeout_millis=timeout_millis, **kwargs)
            results.append(r == MetricExportResult.SUCCESS)
            return r

    exporter = Recording(**kw)
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    resource = Resource.create(
        {
            "service.name": service,
            "service.namespace": "llm",
            "service.instance.id": f"{service}-0",
            "deployment.environment": "test",
        }
    )
    provider = MeterProvider(resource=resource, metric_readers=[reader])
    meter = provider.get_meter("infertel-test", "1.0")
    tokens = meter.create_counter("llm.tokens", unit="{token}", description="Tokens generated.")
    depth = meter.create_up_down_counter("queue.depth", description="Requests waiting.")
    duration = meter.create_histogram(
        "llm.request.duration", unit="s", description="Request duration.", explicit_bucket_boundaries_advisory=[0.1, 1.0, 10.0]
    )
    gpu = meter.create_gauge("gpu.utilization", unit="1", description="GPU busy fraction.")
    attrs = {"model": "m"}
    tokens.add(5, attrs)
    depth.add(3)
    duration.record(0.05, attrs)
    duration.record(0.5, attrs)
    gpu.set(0.75, {"gpu": "0"})
    reader.force_flush()
    tokens.add(7, attrs)
    depth.add(-1)
    duration.record(5, attrs)
    duration.record(50, attrs)
    reader.force_flush()
    provider.shutdown()
    print(json.dumps({"ok": results}))


def raw(url):
    import urllib.request
    import urllib.error

    from google.protobuf import json_format
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
        ExportMetricsServiceResponse,
    )

    req = ExportMetricsServiceRequest()
    rm = req.resource_metrics.add()
    kv = rm.resource.attributes.add()
    kv.key, kv.value.string_value = "service.name", "raw"
    sm = rm.scope_metrics.add()
    eh = sm.metrics.add()
    eh.name = "native.latency"
    eh.exponential_histogram.aggregation_temporality = 2
    for _ in range(2):
        p = eh.exponential_histogram.data_points.add()
        p.count, p.scale, p.time_unix_nano = 1, 2, time.time_ns()
    g = sm.metrics.add()
    g.name = "raw.gauge"
    p = g.gauge.data_points.add()
    p.as_double, p.time_unix_nano = 4.5, time.time_ns()

    def post(body, ctype):
        r = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": ctype})
        try:
            with urllib.request.urlopen(r) as resp:
                return resp.status, resp.headers.get("Content-Type"), resp.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get("Content-Type"), e.read()

    out = {}
    code, ct, body = post(req.SerializeToString(), "application/x-protobuf")
    resp = ExportMetricsServiceResponse()
    resp.ParseFromString(body)
    out["proto"] = {
        "status": code,
        "content_type": ct,
        "rejected": resp.partial_success.rejected_data_points,
        "message": resp.partial_success.error_message,
    }
    code, ct, body = post(json_format.MessageToJson(req).encode(), "application/json")
    resp = json_format.Parse(body.decode(), ExportMetricsServiceResponse())
    out["json"] = {
        "status": code,
        "content_type": ct,
        "rejected": resp.partial_success.rejected_data_points,
        "message": resp.partial_success.error_message,
    }
    code, ct, body = post(b"x", "text/plain")
    out["text"] = {"status": code}
    print(json.dumps(out))


if sys.argv[1] == "sdk":
    sdk(*sys.argv[2:6])
else:
    raw(sys.argv[2])
