#!/usr/bin/env python3
"""An independent OTLP metrics receiver for infertel's end-to-end tests.

Built only on the official `opentelemetry-proto` Python package (plus grpcio,
protobuf, googleapis-common-protos, grpcio-status and zstandard); none of
infertel's code. It serves OTLP/gRPC (MetricsService/Export) and OTLP/HTTP
(POST /v1/metrics and any other path, protobuf, gzip/zstd/identity bodies),
decodes every request with the official message classes and appends one JSON
line per request to OUT/requests.jsonl:

  {"transport": "grpc"|"http", "path": ..., "encoding": ..., "headers": {...},
   "time": unix seconds, "reply": what was answered, "body": the request as
   google.protobuf.json_format.MessageToDict(preserving_proto_field_name=True)}

Replies follow a script (a JSON list given with --script), consumed one entry
per request in order; when it runs out, requests get a plain success. Entries:
  {"http": 503, "retry_after": "1"}           HTTP status (+ Retry-After), google.rpc.Status body
  {"grpc": "UNAVAILABLE"}                     a gRPC status code by name
  {"grpc": "RESOURCE_EXHAUSTED", "retry_delay_s": 1.5}   ... with a google.rpc.RetryInfo
  {"partial": {"rejected": 3, "message": "m"}}   success with partial_success
An entry for the other transport's kind is answered as success.
"""

import argparse
import gzip
import json
import os
import sys
import threading
import time
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import zstandard
from google.protobuf import any_pb2, duration_pb2, json_format
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc

LOCK = threading.Lock()
SCRIPT = []
OUT = None


def next_reply():
    with LOCK:
        return SCRIPT.pop(0) if SCRIPT else {}


def record(entry):
    with LOCK:
        with open(os.path.join(OUT, "requests.jsonl"), "a") as f:
            f.write(json.dumps(entry) + "\n")


def partial_response(reply):
    resp = metrics_service_pb2.ExportMetricsServiceResponse()
    p = reply.get("partial")
    if p:
        resp.partial_success.rejected_data_points = int(p.get("rejected", 0))
        resp.partial_success.error_message = p.get("message", "")
    return resp


class Servicer(metrics_service_pb2_grpc.MetricsServiceServicer):
    def Export(self, request, context):
        reply = next_reply()
        md = {k: v for k, v in context.invocation_metadata() if not k.endswith("-bin")}
        record({
            "transport": "grpc",
            "path": "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
            "encoding": md.get("grpc-encoding", "identity"),
            "headers": md,
            "time": time.time(),
            "reply": reply,
            "body": json_format.MessageToDict(request, preserving_proto_field_name=True),
        })
        code = reply.get("grpc")
        if code:
            st = status_pb2.Status(code=getattr(code_pb2, code), message=f"scripted {code}")
            if "retry_delay_s" in reply:
                d = reply["retry_delay_s"]
                ri = error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=int(d), nanos=int((d - int(d)) * 1e9)))
                a = any_pb2.Any()
                a.Pack(ri)
                st.details.append(a)
            context.abort_with_status(rpc_status.to_status(st))
        return partial_response(reply)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(n)
        enc = (self.headers.get("Content-Encoding") or "identity").lower()
        reply = next_reply()
        entry = {
            "transport": "http",
            "path": self.path,
            "encoding": enc,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "time": time.time(),
            "reply": reply,
        }
        try:
            if enc == "gzip":
                data = gzip.decompress(raw)
            elif enc == "zstd":
                data = zstandard.ZstdDecompressor().decompressobj().decompress(raw)
            elif enc == "identity":
                data = raw
            else:
                raise ValueError(f"unsupported Content-Encoding {enc}")
            req = metrics_service_pb2.ExportMetricsServiceRequest()
            req.ParseFromString(data)
            entry["body"] = json_format.MessageToDict(req, preserving_proto_field_name=True)
        except Exception as e:  # a decode failure is a 400, as a real receiver would answer
            entry["error"] = str(e)
            record(entry)
            self.answer(400, status_pb2.Status(code=3, message=f"cannot decode: {e}").SerializeToString())
            return
        record(entry)
        status = reply.get("http")
        if status:
            body = status_pb2.Status(code=14, message=f"scripted {status}").SerializeToString()
            extra = {"Retry-After": reply["retry_after"]} if "retry_after" in reply else {}
            self.answer(int(status), body, extra)
            return
        self.answer(200, partial_response(reply).SerializeToString())

    def answer(self, code, body, extra=None):
        self.send_response(code)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)


def main():
    global OUT, SCRIPT
    ap = argparse.ArgumentParser()
    ap.add_argument("--grpc-port", type=int, required=True)
    ap.add_argument("--http-port", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--script", default="[]")
    a = ap.parse_args()
    OUT = a.out
    SCRIPT = json.loads(a.script)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Servicer(), server)
    server.add_insecure_port(f"127.0.0.1:{a.grpc_port}")
    server.start()
    httpd = ThreadingHTTPServer(("127.0.0.1", a.http_port), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    with open(os.path.join(OUT, "ready"), "w") as f:
        f.write("ok\n")
    print("otlp receiver ready", flush=True)
    try:
        server.wait_for_termination()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
