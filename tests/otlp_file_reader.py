#!/usr/bin/env python3
"""Reads files written by a file exporter with the official OpenTelemetry
protobuf package (opentelemetry-proto) and prints what they hold as JSON.

usage: otlp_file_reader.py FORMAT COMPRESSION FILE...
  FORMAT: json (a line per request, protobuf's JSON mapping, parsed with
          google.protobuf.json_format, unknown fields refused) or proto;
  COMPRESSION: none or zstd. Proto and compressed files are framed as the
          Collector's file exporter frames them: a 4-byte big-endian length
          before each message.
Prints {"requests": N, "metrics": [{name, type, monotonic, temporality,
resource, points: [{attributes, value | count, sum, bounds, buckets}]}]}.
"""
import json
import struct
import sys

from google.protobuf import json_format
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest


def messages(path, fmt, compression):
    data = open(path, "rb").read()
    if fmt == "json" and compression == "none":
        for line in data.split(b"\n"):
            if line.strip():
                req = ExportMetricsServiceRequest()
                json_format.Parse(line.decode("utf-8"), req, ignore_unknown_fields=False)
                yield req
        return
    dctx = None
    if compression == "zstd":
        import zstandard

        dctx = zstandard.ZstdDecompressor()
    i = 0
    while i < len(data):
        (n,) = struct.unpack(">I", data[i : i + 4])
        body = data[i + 4 : i + 4 + n]
        if len(body) != n:
            raise SystemExit(f"{path}: a message at byte {i} is cut short")
        i += 4 + n
        if dctx is not None:
            body = dctx.decompress(body, max_output_size=1 << 28)
        req = ExportMetricsServiceRequest()
        if fmt == "json":
            json_format.Parse(body.decode("utf-8"), req, ignore_unknown_fields=False)
        else:
            req.ParseFromString(body)
        yield req


def num(v):
    """Non-finite values as strings: the reading side parses strict JSON."""
    if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
        return "NaN" if v != v else ("+Inf" if v > 0 else "-Inf")
    return v


def attrs(kvs):
    out = {}
    for kv in kvs:
        v = kv.value
        out[kv.key] = getattr(v, v.WhichOneof("value")) if v.WhichOneof("value") else None
    return out


def main():
    fmt, compression, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    out = {"requests": 0, "metrics": []}
    for f in files:
        for req in messages(f, fmt, compression):
            out["requests"] += 1
            for rm in req.resource_metrics:
                res = attrs(rm.resource.attributes)
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        kind = m.WhichOneof("data")
                        d = getattr(m, kind)
                        rec = {"name": m.name, "type": kind, "resource": res, "points": []}
                        if kind == "sum":
                            rec["monotonic"] = d.is_monotonic
                        if kind in ("sum", "histogram"):
                            rec["temporality"] = d.aggregation_temporality
                        for p in d.data_points:
                            pt = {"attributes": attrs(p.attributes), "time": p.time_unix_nano}
                            if kind in ("gauge", "sum"):
                                pt["value"] = num(p.as_double if p.WhichOneof("value") == "as_double" else p.as_int)
                            elif kind == "histogram":
                                pt.update(count=p.count, sum=num(p.sum), bounds=list(p.explicit_bounds), buckets=list(p.bucket_counts))
                            elif kind == "summary":
                                pt.update(count=p.count, sum=num(p.sum))
                            rec["points"].append(pt)
                        out["metrics"].append(rec)
    json.dump(out, sys.stdout)


main()
