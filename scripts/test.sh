#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs what the tests need
# (Debian's prometheus, victoria-metrics, nginx, curl, openssl, dnsmasq,
# chromium for the status page's browser test, golang-go for go tool pprof),
# then runs
# every test of the workspace. Tests start the real servers themselves on free
# loopback ports and stop them by PID.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

need=()
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/usr/bin/$1" ]; }
have prometheus       || need+=(prometheus)
have victoria-metrics || need+=(victoria-metrics)
have nginx            || need+=(nginx)
have curl             || need+=(curl)
have openssl          || need+=(openssl)
have dnsmasq          || need+=(dnsmasq-base)
have chromium         || need+=(chromium)
# go tool pprof reads the pprof extension's profiles (tests/pprof.rs).
have go               || need+=(golang-go)
if [ "${#need[@]}" -gt 0 ]; then
  echo "== installing: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  # Package scripts may try to start the services; the tests run their own
  # instances on free ports, so that is harmless.
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

echo "== prometheus: $(prometheus --version 2>&1 | head -n1)"
echo "== victoria-metrics: $(victoria-metrics -version 2>&1 | head -n1)"

# The independent OTLP receiver (tests/otlp_receiver.py) and file reader run on the
# official opentelemetry-proto package, the otlp receiver test on the official
# OpenTelemetry Python SDK and its OTLP exporters, the SigV4 check on botocore;
# versions checked to install here.
echo "== python packages for the OTLP receiver"
python3 -m pip install --quiet --disable-pip-version-check \
  opentelemetry-proto==1.45.2 protobuf==7.36.2 grpcio==1.85.3 grpcio-status==1.85.3 \
  googleapis-common-protos==1.76.0 zstandard==0.25.0 \
  opentelemetry-sdk==1.45.2 opentelemetry-exporter-otlp-proto-grpc==1.45.2 opentelemetry-exporter-otlp-proto-http==1.45.2 \
  botocore==1.43.11

cargo test --workspace --locked --no-fail-fast "$@"
