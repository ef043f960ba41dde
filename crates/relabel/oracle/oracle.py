"""Drives a real Prometheus to record its relabeling results (see
run-prometheus-oracle.sh). Standard library only.

Metric relabeling: every case is one scrape job against the same local HTTP
exposition, with its own `metric_relabel_configs`. Each job carries a target
label `oracle_case` that no rule touches, so stored series can be attributed
to their case. The input of metric relabeling in Prometheus is the exposed
label set plus the target labels (job, instance, oracle_case); the script
builds those inputs itself and a control case without rules checks that they
equal what Prometheus stores.

Target relabeling: a job with several static targets and `relabel_configs`;
/api/v1/targets reports each target's pre-relabel labels (discoveredLabels)
and its final public labels, or lists it as dropped.
"""

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

# (metric name, labels) exposed by the fake target; value is irrelevant.
EXPOSITION = [
    ("vllm:num_requests_running", {"model_name": "Llama-3.1-8B", "engine": "0"}),
    ("vllm:gpu_cache_usage_perc", {"model_name": "Mistral-7B-v0.3", "engine": "1"}),
    ("DCGM_FI_DEV_GPU_TEMP", {"gpu": "0", "UUID": "GPU-abc", "Hostname": "node-1", "modelName": "NVIDIA H200", "device": "nvidia0"}),
    ("DCGM_FI_DEV_GPU_UTIL", {"gpu": "1", "UUID": "GPU-def", "Hostname": "Node-2", "modelName": "NVIDIA H200", "device": "nvidia1"}),
    ("http_requests_total", {"method": "GET", "path": "/v1/completions", "code": "200"}),
    ("http_requests_total", {"method": "post", "path": "/v1/chat", "code": "500"}),
    ("weird", {"v": "é1", "w": "ΟΔΟΣ", "x": "Straße ﬀ ᾳ", "y": "İx", "z": "a;b", "d": "٣4"}),
    ("tmp_test", {"__tmp_keep": "yes", "a": "1"}),
    ("pair", {"src": "x", "dst": "x"}),
    ("pair", {"src": "x", "dst": "y"}),
    ("pair", {"src": "", "dst": "z"}),
    ("empty_val", {"a": "", "b": "2"}),
]

METRIC_CASES = {
    "control": [],
    "replace": [
        {"source_labels": ["model_name"], "regex": "([^-]+)-(.*)", "target_label": "family"},
        {"source_labels": ["model_name"], "regex": "([^-]+)-(.*)", "target_label": "rest", "replacement": "${2}_v"},
        {"source_labels": ["model_name"], "regex": "([^-]+)-(.*)", "target_label": "m_${1}", "replacement": "$2"},
        {"source_labels": ["engine"], "target_label": "e1x", "replacement": "$1x"},
        {"source_labels": ["engine"], "target_label": "e1b", "replacement": "${1}x"},
        {"source_labels": ["gpu"], "target_label": "${1}", "replacement": "invalid-target-skipped"},
        {"source_labels": ["gpu", "missing", "Hostname"], "separator": "/", "target_label": "joined"},
        {"source_labels": ["method"], "regex": "nomatch", "target_label": "method", "replacement": "changed"},
        {"target_label": "code", "replacement": ""},
        {"target_label": "env", "replacement": "prod"},
        {"source_labels": ["path"], "regex": "/v1/(.*)", "target_label": "path", "replacement": "$$1-$1"},
        {"source_labels": ["instance"], "regex": "(.*):\\d+", "target_label": "host"},
        {"source_labels": ["device"], "regex": "nvidia(\\d)", "target_label": "device"},
    ],
    "keep": [
        {"source_labels": ["__name__"], "regex": "vllm:.*|DCGM_.*|pair", "action": "keep"},
        {"source_labels": ["src"], "regex": ".+", "action": "drop"},
    ],
    "drop": [
        {"source_labels": ["code"], "regex": "5..", "action": "drop"},
        {"source_labels": ["__name__", "engine"], "regex": "vllm:.*;1", "action": "DROP"},
    ],
    "hashmod": [
        {"source_labels": ["__name__", "gpu"], "modulus": 7, "target_label": "shard", "action": "hashmod"},
        {"source_labels": ["__name__"], "modulus": 4294967296, "target_label": "h32", "action": "hashmod"},
        {"source_labels": ["missing"], "modulus": 1000003, "target_label": "h_empty", "action": "hashmod"},
    ],
    "labelmap": [
        {"regex": "(.*)Name", "replacement": "${1}_name", "action": "labelmap"},
        {"regex": "__tmp_(.+)", "replacement": "tmp_$1", "action": "labelmap"},
        {"regex": "(src|dst)", "replacement": "endpoint", "action": "LabelMap"},
    ],
    "labeldrop": [
        {"regex": "UUID|Hostname|engine|__tmp_.*", "action": "labeldrop"},
    ],
    "labelkeep": [
        {"regex": "__name__|job|instance|oracle_case|gpu|model_name|[a-d]", "action": "labelkeep"},
    ],
    "case": [
        {"source_labels": ["w"], "target_label": "w_lower", "action": "lowercase"},
        {"source_labels": ["x"], "target_label": "x_upper", "action": "uppercase"},
        {"source_labels": ["y"], "target_label": "y_lower", "action": "lowercase"},
        {"source_labels": ["y"], "target_label": "y_upper", "action": "uppercase"},
        {"source_labels": ["Hostname", "modelName"], "target_label": "hu", "action": "uppercase"},
        {"source_labels": ["method"], "target_label": "method", "action": "lowercase"},
    ],
    "goregex": [
        {"source_labels": ["v"], "regex": "(\\w+)", "target_label": "v_word"},
        {"source_labels": ["d"], "regex": "\\d(\\d)", "target_label": "d_digits", "replacement": "$1"},
        {"source_labels": ["d"], "regex": "\\D(\\d)", "target_label": "d_nondigit", "replacement": "$1"},
        {"source_labels": ["Hostname"], "regex": "(?i)NODE-(\\d)", "target_label": "node"},
        {"source_labels": ["model_name"], "regex": "[[:alpha:]]+-(?P<ver>[0-9.]+)-.*", "target_label": "ver", "replacement": "v$ver"},
        {"source_labels": ["z"], "regex": "a[;]b", "target_label": "z_ok", "replacement": "yes"},
        {"source_labels": ["x"], "regex": "(.*)\\bﬀ\\b.*", "target_label": "x_before"},
        {"source_labels": ["path"], "regex": "/v1/comp(l|L)etions|/x", "target_label": "p_alt", "replacement": "[$1]"},
        {"source_labels": ["path"], "regex": "/v1/(?:chat)?", "target_label": "p_chat", "replacement": "chat"},
    ],
    "keepequal": [
        {"source_labels": ["src"], "target_label": "dst", "action": "keepequal"},
    ],
    "dropequal": [
        {"source_labels": ["src"], "target_label": "dst", "action": "dropequal"},
    ],
    "tmp": [
        {"source_labels": ["model_name"], "regex": "([^-]+)-.*", "target_label": "__tmp_family"},
        {"source_labels": ["__tmp_family", "engine"], "regex": "Llama;(.*)", "target_label": "llama_engine"},
        {"source_labels": ["__tmp_keep"], "regex": "yes", "target_label": "kept_tmp", "replacement": "true"},
        {"regex": "__tmp_.*", "action": "labeldrop"},
    ],
}

TARGET_CONFIGS = [
    {"source_labels": ["__address__"], "modulus": 3, "target_label": "__tmp_hash", "action": "hashmod"},
    {"source_labels": ["__tmp_hash"], "regex": "0|1", "action": "keep"},
    {"source_labels": ["__address__"], "modulus": 1000, "target_label": "shard", "action": "hashmod"},
    {"regex": "__meta_(.+)", "replacement": "meta_$1", "action": "labelmap"},
    {"source_labels": ["__address__"], "regex": "(.*):(\\d+)", "target_label": "port", "replacement": "$2"},
    {"source_labels": ["__address__"], "regex": "(.*):(\\d+)", "target_label": "instance", "replacement": "$1"},
    {"source_labels": ["team"], "target_label": "team_lc", "action": "lowercase"},
    {"source_labels": ["__scheme__", "__metrics_path__"], "separator": "", "target_label": "endpoint"},
    {"source_labels": ["__address__"], "regex": "127\\.0\\.0\\.1:.*", "target_label": "__address__", "replacement": "127.0.0.9:1"},
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def exposition_text():
    def esc(v):
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    lines = []
    for i, (name, labels) in enumerate(EXPOSITION):
        body = ",".join(f'{k}="{esc(v)}"' for k, v in labels.items())
        lines.append(f"{name}{{{body}}} {i}")
    return ("\n".join(lines) + "\n").encode()


class Handler(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


def api(port, path, **params):
    url = f"http://127.0.0.1:{port}{path}?" + urllib.parse.urlencode(params, doseq=True)
    with urllib.request.urlopen(url, timeout=5) as r:
        doc = json.load(r)
    if doc.get("status") != "success":
        raise RuntimeError(f"{url}: {doc}")
    return doc["data"]


def canon(labels):
    return dict(sorted((k, v) for k, v in labels.items() if v != ""))


def main():
    prom, out_path = sys.argv[1], sys.argv[2]
    version = subprocess.run([prom, "--version"], capture_output=True, text=True).stdout.splitlines()[0]

    Handler.body = exposition_text()
    srv_port = free_port()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", srv_port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    target = f"127.0.0.1:{srv_port}"

    jobs = []
    for case, rules in METRIC_CASES.items():
        jobs.append({
            "job_name": f"case_{case}",
            "static_configs": [{"targets": [target], "labels": {"oracle_case": case}}],
            "metric_relabel_configs": rules,
        })
    target_addrs = [f"127.0.0.{i}:{9000 + i}" for i in range(2, 14)] + [target]
    jobs.append({
        "job_name": "targets",
        "metrics_path": "/target-relabel",
        "static_configs": [
            {"targets": target_addrs[:7], "labels": {"__meta_az": "us-east-1a", "team": "ML-Infra", "oracle_case": "targets"}},
            {"targets": target_addrs[7:], "labels": {"__meta_rack": "r1", "team": "GPU", "oracle_case": "targets"}},
        ],
        "relabel_configs": TARGET_CONFIGS,
    })
    config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"}, "scrape_configs": jobs}

    tmp = tempfile.mkdtemp(prefix="prom-oracle-")
    proc = None
    try:
        cfg_path = os.path.join(tmp, "prometheus.yml")
        with open(cfg_path, "w") as f:
            json.dump(config, f, indent=1)  # JSON is YAML
        web_port = free_port()
        log = open(os.path.join(tmp, "prometheus.log"), "w")
        proc = subprocess.Popen(
            [prom, f"--config.file={cfg_path}", f"--storage.tsdb.path={tmp}/data",
             f"--web.listen-address=127.0.0.1:{web_port}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT)

        # Wait until every metric case has been scraped at least 3 times.
        deadline = time.time() + 60
        while True:
            if proc.poll() is not None:
                log.flush()
                raise RuntimeError("prometheus exited:\n" + open(log.name).read())
            try:
                data = api(web_port, "/api/v1/query", query="count_over_time(up[1m])")
                seen = {r["metric"].get("oracle_case"): float(r["value"][1]) for r in data["result"]}
                if all(seen.get(c, 0) >= 3 for c in METRIC_CASES):
                    break
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError("timed out waiting for scrapes")
            time.sleep(0.5)

        report = {"up", "scrape_duration_seconds", "scrape_samples_scraped",
                  "scrape_samples_post_metric_relabeling", "scrape_series_added"}
        series = api(web_port, "/api/v1/series", **{"match[]": ['{oracle_case=~".+"}'], "start": "0", "end": str(time.time() + 60)})
        by_case = {c: [] for c in METRIC_CASES}
        for s in series:
            if s["__name__"] in report or s["oracle_case"] == "targets":
                continue
            by_case[s["oracle_case"]].append(canon(s))

        metric_cases = []
        for case, rules in METRIC_CASES.items():
            inputs = []
            for name, labels in EXPOSITION:
                full = dict(labels)
                full.update({"__name__": name, "job": f"case_{case}", "instance": target, "oracle_case": case})
                inputs.append(canon(full))
            outputs = sorted(by_case[case], key=lambda l: json.dumps(l, sort_keys=True))
            if case == "control":
                assert outputs == sorted(inputs, key=lambda l: json.dumps(l, sort_keys=True)), \
                    f"control case: Prometheus stored {outputs}, expected the inputs {inputs}"
            metric_cases.append({"name": case, "configs": rules, "inputs": inputs, "outputs": outputs})

        tdata = api(web_port, "/api/v1/targets", state="any")
        targets = []
        for t in tdata["activeTargets"]:
            if t["scrapePool"] == "targets":
                targets.append({"input": canon(t["discoveredLabels"]), "output": canon(t["labels"])})
        for t in tdata["droppedTargets"]:
            if t["discoveredLabels"].get("job") == "targets":
                targets.append({"input": canon(t["discoveredLabels"]), "output": None})
        targets.sort(key=lambda t: t["input"]["__address__"])
        assert len(targets) == len(target_addrs), f"expected {len(target_addrs)} targets, got {targets}"

        result = {
            "comment": "Generated by run-prometheus-oracle.sh; do not edit. Replayed by tests/prometheus_oracle.rs.",
            "prometheus_version": version,
            "metric_cases": metric_cases,
            "target_cases": [{"name": "targets", "configs": TARGET_CONFIGS, "targets": targets}],
        }
        with open(out_path, "w") as f:
            json.dump(result, f, indent=1, ensure_ascii=False, sort_keys=False)
            f.write("\n")
        kept = sum(len(c["outputs"]) for c in metric_cases)
        print(f"{version}: {len(metric_cases)} metric cases ({kept} stored series), "
              f"{len(targets)} targets ({sum(t['output'] is None for t in targets)} dropped) -> {out_path}")
    finally:
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        server.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
