#!/usr/bin/env bash
# Long runs: a matrix of seeded harness runs made one at a time with release binaries, each
# appended as one row to a table as soon as it ends, so an interrupted matrix keeps every
# finished row and a rerun with the same table skips the seeds it already holds.
#
# Each entry of the matrix is SEED:NET[:NODES] (NODES 3 unless given; a five-node entry
# passes `--nodes 5`). Every run uses the same nemesis list and duration. A row holds the
# seed, network mode, node count, the commit the binaries were built from, the ops, the
# verdict (every checker valid, or the rows that are not), the stalls line and every
# coverage count of verdict.txt, in its order. The run's folder stays in $LONG_OUT for
# `weir-jepsen --check` and for reading.
#
# Usage: jepsen/long.sh TABLE.md SEED:NET[:NODES]...
# Environment: LONG_NEMESIS (default all), LONG_DURATION s (default 600), LONG_OUT (default
# jepsen/runs/long), LONG_BIN (default target/release: `cargo build --release --workspace --bins` first).
# Exit status: 0 when every run of this invocation was valid, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "$#" -lt 2 ]; then
    echo "usage: jepsen/long.sh TABLE.md SEED:NET[:NODES]..." >&2
    exit 2
fi
table=$1
shift
nemesis=${LONG_NEMESIS:-all}
duration=${LONG_DURATION:-600}
out_dir=${LONG_OUT:-jepsen/runs/long}
bin=${LONG_BIN:-target/release}
for b in weir weir-jepsen; do
    if [ ! -x "$bin/$b" ]; then
        echo "long: $bin/$b is missing: cargo build --release --workspace --bins" >&2
        exit 2
    fi
done
commit=$(git rev-parse --short HEAD)
if ! git diff --quiet HEAD -- crates src jepsen/src; then
    commit="$commit+dirty"
fi
mkdir -p "$out_dir"
touch "$table"

# The table's header, written before its first row: the coverage column names the counts
# of the first verdict.txt (`-` when that run left none).
header() {
    [ -s "$table" ] && return
    local names
    names=$(awk '/^coverage:/ {c = 1; next} c && NF {$NF = ""; sub(/ +$/, ""); sub(/^ +/, "");
        printf "%s%s", s, $0; s = " / "}' "$1" 2>/dev/null)
    {
        echo "| seed | net | nodes | commit | nemesis | s | ops | verdict | stalls | coverage: ${names:--} |"
        echo "|---|---|---|---|---|---|---|---|---|---|"
    } >"$table"
}

bad=0
for entry in "$@"; do
    IFS=':' read -r seed net nodes <<<"$entry"
    nodes=${nodes:-3}
    if grep -qF "| $seed | $net | $nodes | " "$table" \
        && grep -F "| $seed | $net | $nodes | " "$table" | grep -qF " | $nemesis | $duration | "; then
        echo "long: seed $seed ($net, $nodes nodes, $nemesis, $duration s) is in $table already; skipped"
        continue
    fi
    out="$out_dir/$nemesis-$net-$nodes-$seed"
    rm -rf "$out"
    size=()
    [ "$nodes" != 3 ] && size=(--nodes "$nodes")
    echo "long: $(date -u +%H:%M:%S) seed $seed, $net, $nodes nodes, --nemesis $nemesis --duration $duration"
    status=0
    "$bin/weir-jepsen" --weir "$bin/weir" --net "$net" --nemesis "$nemesis" --duration "$duration" \
        --seed "$seed" "${size[@]}" --out "$out" >"$out.log" 2>&1 || status=$?
    verdict_file="$out/verdict.txt"
    if [ ! -s "$verdict_file" ]; then
        row="| $seed | $net | $nodes | $commit | $nemesis | $duration | - | **no verdict** (exit $status; see $out.log) | - | - |"
        bad=1
    else
        ops=$(sed -n '1s/.*  ops \([0-9]*\).*/\1/p' "$verdict_file")
        # Rows whose verdict is not `valid`: the checker's name is the first 12 columns.
        flagged=$(awk '/^checker/ {t = 1; next} t && NF == 0 {t = 0}
            t && substr($0, 14, 7) != "valid  " { n = substr($0, 1, 12); sub(/ +$/, "", n);
            v = substr($0, 14, 9); sub(/ +$/, "", v); printf "%s%s %s", s, n, v; s = ", " }' "$verdict_file")
        stalls=$(sed -n '2s/^leader stalls \([0-9]*\) (judged \([0-9]*\).*one \([0-9]*\).*$/\1, judged \2, \3 losers/p' "$verdict_file")
        coverage=$(awk '/^coverage:/ {c = 1; next} c && NF {printf "%s%s", s, $NF; s = " / "}' "$verdict_file")
        if [ "$status" -eq 0 ] && [ -z "$flagged" ]; then
            verdict="**all valid**"
        else
            verdict="exit $status: $flagged"
            bad=1
        fi
        row="| $seed | $net | $nodes | $commit | $nemesis | $duration | $ops | $verdict | ${stalls:-?} | $coverage |"
    fi
    header "$verdict_file"
    echo "$row" >>"$table"
    echo "long: $row"
done
exit "$bad"
