#!/usr/bin/env bash
# Differential oracle: runs a real Prometheus (default /usr/bin/prometheus,
# 2.42) against a fixed exposition with relabel rules exercising every action,
# and records inputs, rules and the label sets Prometheus produced in
# prometheus-2.42-results.json, which tests/prometheus_oracle.rs replays
# through our Relabeler.
#
# Usage: crates/relabel/oracle/run-prometheus-oracle.sh [path/to/prometheus]
# Needs: bash, python3 (standard library only). Takes about 10 seconds.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec python3 "$here/oracle.py" "${1:-${PROMETHEUS:-/usr/bin/prometheus}}" "$here/prometheus-2.42-results.json"
