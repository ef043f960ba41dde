#!/usr/bin/env python3
"""Differential oracle: what does real Prometheus 2.42 do with each 0.0.4 body?

Serves every `cases/*.txt` file over HTTP (content type `text/plain;
version=0.0.4`), points a throw-away Prometheus at them (one static scrape job
per case, 1 s interval), waits until every target has been scraped, then reads
back through the HTTP API:

* `up` for the job (1: the scrape parsed, 0: the scrape failed),
* the target's `lastError` (why it failed),
* every series stored for the job, with labels and value (minus `job`,
  `instance` and the synthetic `up`/`scrape_*` series),
* the per-target metadata (`/api/v1/targets/metadata`): TYPE and HELP as
  Prometheus understood them.

and writes it all to `prometheus-2.42-results.json`, which the Rust test
`tests/text_edge_cases.rs` replays against our parser.

Usage: oracle/run-prometheus-oracle.py [--prometheus /usr/bin/prometheus]
Needs only the Python standard library. Ports are picked free (bind port 0),
processes are stopped by PID.
"""

import argparse
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "cases")
OUT = os.path.join(HERE, "prometheus-2.42-results.json")
SYNTHETIC = {"up", "scrape_duration_seconds", "scrape_samples_scraped",
             "scrape_samples_post_metric_relabeling", "scrape_series_added"}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def load_cases():
    cases = {}
    for f in sorted(os.listdir(CASES)):
        if f.endswith(".txt"):
            with open(os.path.join(CASES, f), "rb") as fh:
                cases[f[:-4]] = fh.read()
    return cases


def serve(cases):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            name = self.path.rsplit("/", 1)[-1]
            body = cases.get(name)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def api(port, path, **params):
    url = "http://127.0.0.1:%d%s?%s" % (port, path, urllib.parse.urlencode(params, doseq=True))
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)["data"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prometheus", default="/usr/bin/prometheus")
    ap.add_argument("--wait", type=float, default=60.0, help="max seconds to wait for all scrapes")
    args = ap.parse_args()

    version = subprocess.run([args.prometheus, "--version"], capture_output=True, text=True)
    version = (version.stdout + version.stderr).splitlines()[0]
    cases = load_cases()
    httpd = serve(cases)
    target = "127.0.0.1:%d" % httpd.server_address[1]
    tmp = tempfile.mkdtemp(prefix="prom-oracle-")
    cfg = os.path.join(tmp, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n")
        for name in cases:
            f.write("  - job_name: case_%s\n    metrics_path: /cases/%s\n"
                    "    static_configs:\n      - targets: ['%s']\n" % (name, name, target))
    port = free_port()
    log = open(os.path.join(tmp, "prometheus.log"), "w")
    proc = subprocess.Popen(
        [args.prometheus, "--config.file=" + cfg, "--storage.tsdb.path=" + os.path.join(tmp, "data"),
         "--web.listen-address=127.0.0.1:%d" % port],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + args.wait
        ups = {}
        while time.time() < deadline:
            time.sleep(1.0)
            try:
                res = api(port, "/api/v1/query", query="up")
            except Exception:
                continue
            ups = {r["metric"]["job"][5:]: r["value"][1] for r in res["result"]}
            if len(ups) == len(cases):
                break
        # One more interval so that every target has at least two scrapes.
        time.sleep(2.5)
        ups = {r["metric"]["job"][5:]: int(r["value"][1])
               for r in api(port, "/api/v1/query", query="up")["result"]}
        targets = {t["labels"]["job"][5:]: t for t in api(port, "/api/v1/targets")["activeTargets"]}
        results = {}
        for name, body in cases.items():
            job = "case_" + name
            series = []
            for r in api(port, "/api/v1/query", query='{job="%s"}' % job)["result"]:
                m = dict(r["metric"])
                metric = m.pop("__name__")
                if metric in SYNTHETIC:
                    continue
                m.pop("job", None)
                m.pop("instance", None)
                series.append({"name": metric, "labels": m, "value": r["value"][1]})
            series.sort(key=lambda s: (s["name"], sorted(s["labels"].items())))
            meta = api(port, "/api/v1/targets/metadata", match_target='{job="%s"}' % job)
            meta = sorted(({"metric": x["metric"], "type": x["type"], "help": x["help"]} for x in meta),
                          key=lambda x: x["metric"])
            t = targets.get(name, {})
            results[name] = {
                "body_hex": body.hex(),
                "up": ups.get(name),
                "last_error": t.get("lastError", ""),
                "series": series,
                "metadata": meta,
            }
        out = {"prometheus": version, "cases": results}
        with open(OUT, "w") as f:
            json.dump(out, f, indent=1, sort_keys=True, ensure_ascii=False)
            f.write("\n")
        missing = [n for n, r in results.items() if r["up"] is None]
        print("%d cases, %d up=1, %d up=0, %d never scraped -> %s" % (
            len(results), sum(1 for r in results.values() if r["up"] == 1),
            sum(1 for r in results.values() if r["up"] == 0), len(missing), OUT))
        if missing:
            print("never scraped:", missing, file=sys.stderr)
            return 1
        return 0
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        httpd.shutdown()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
