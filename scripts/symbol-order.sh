#!/usr/bin/env bash
# Writes crates/infertel/symbol-order.txt: the functions the release binary
# executes on the agent's usual work, hottest first, for the linker to place
# together (see crates/infertel/build.rs for why).
#
#   scripts/symbol-order.sh          build, run the work under callgrind, write the file, relink
#   scripts/symbol-order.sh --check  how many listed functions the release binary still has
#
# The work: peer-bench's scrape-to-remote-write (5 nginx targets serving the
# vLLM + dcgm-exporter body, into VictoriaMetrics; PEER_BENCH points at the
# harness, default ../shared/bench/peer-bench) and `infertel demo` (the
# simulated vLLM + dcgm through the inference processor). Needs valgrind.
# Run it again after changing the hot path or a dependency's version: the
# names carry the compiler's hashes, and a stale file only loses the benefit.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="$PWD/target/release/infertel"
ORDER="$PWD/crates/infertel/symbol-order.txt"
PEER_BENCH="${PEER_BENCH:-$PWD/../shared/bench/peer-bench}"

check() {
  local total have
  total=$(grep -c . "$ORDER" || true)
  have=$(comm -12 <(nm "$BIN" | awk '{print $NF}' | sort -u) <(sort -u "$ORDER") | wc -l)
  echo "symbol-order: $have of $total listed functions are in $BIN"
}

if [[ ${1:-} == --check ]]; then
  check
  exit 0
fi

command -v valgrind >/dev/null || { echo "symbol-order: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
cargo build --release -p infertel
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
CG=(valgrind --tool=callgrind --dump-instr=no --demangle=no --compress-strings=no --compress-pos=no)

cat >"$tmp/infertel" <<WRAP
#!/usr/bin/env bash
[[ \$1 == run ]] || exec "$BIN" "\$@"
exec ${CG[*]} --callgrind-out-file=$tmp/bench.cg "$BIN" "\$@"
WRAP
chmod +x "$tmp/infertel"
TARGETS=5 INFERTEL_BIN="$tmp/infertel" INFERTEL_NAME=callgrind CONTESTANTS=infertel ROUNDS=1 \
  DURATION=20s WARMUP=10s WARMUP_MAX=20s READY_TIMEOUT=120s OUT="$tmp/pb.json" "$PEER_BENCH" >&2
"${CG[@]}" --callgrind-out-file="$tmp/demo.cg" "$BIN" demo --duration 15s >/dev/null 2>&1 || true

python3 - "$BIN" "$tmp/bench.cg" "$tmp/demo.cg" >"$tmp/order.txt" <<'PY'
import sys
from collections import Counter

binary, outs = sys.argv[1], sys.argv[2:]
order = []
for path in outs:
    cost, ob, fn, call = Counter(), None, None, False
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("ob="):
                ob = line[3:].strip()
            elif line.startswith("fn="):
                fn = line[3:].strip() if ob == binary else None
            elif line.startswith("calls="):
                # The next cost line is the callee's inclusive cost, not this function's.
                call = True
            elif line[:1].isdigit():
                parts = line.split()
                if fn and not call and len(parts) >= 2:
                    cost[fn] += int(parts[1])
                call = False
    # Hottest first: the steady state's code shares pages; what ran once follows.
    order += [name for name, _ in sorted(cost.items(), key=lambda kv: -kv[1])]
seen = set()
for name in order:
    # Callgrind's own names for recursion levels and unknown code are not symbols.
    if name in seen or "'" in name or name.startswith("0x") or " " in name:
        continue
    seen.add(name)
    print(name)
PY
[[ -s "$tmp/order.txt" ]] || { echo "symbol-order: callgrind listed no function of $BIN" >&2; exit 1; }
cp "$tmp/order.txt" "$ORDER"
cargo build --release -p infertel
check
