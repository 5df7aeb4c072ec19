#!/usr/bin/env bash
# Negative controls (issue #12, item 1): builds `weir` and `weir-jepsen` with the test-only
# `planted` feature into a target dir of their own, then runs, for each planted bug, one
# short seeded harness run with `WEIR_PLANT=<name>` (read by `weir serve` and by the client
# library inside the harness). A plant passes when the run exits 1 AND its verdict marks
# the expected checker invalid; a plant that is not caught, or caught only by other
# checkers, fails the script. The table of plants, checkers and runs is in jepsen/README.md.
#
# Usage: jepsen/planted.sh [PLANT...]   (default: every plant in the table below)
set -uo pipefail
cd "$(dirname "$0")/.."

target=${PLANTED_TARGET_DIR:-target/planted}
cargo build --workspace --bins --locked --features weir/planted --target-dir "$target" || exit 1
bin="$target/debug"

# plant | checker that must flag it ("-": no checker tells it from an unplanted run yet,
# so the run is made and reported, not judged) | nemesis | net | duration s | seed
plants=(
    "no-freeze|-|kill|loopback|30|1"
    "wall-gap|P1 permits|clock|loopback|40|1"
    "margin-zero|P1 permits|clock,client-pause|loopback|40|1"
    "keepalive-arrival|P1 permits|client-pause|loopback|30|1"
    "fast-clock|rate|delay|loopback|20|1"
    "reused-fence|P2 fences|delay|loopback|20|1"
    "settle-twice|settlement|kill|loopback|30|1"
    "halt-skipped|halts|delay|loopback|20|1"
    "expiry-no-grant|-|client-kill|loopback|30|1"
)

want=("$@")
failed=0
for row in "${plants[@]}"; do
    IFS='|' read -r plant checker nemesis net duration seed <<<"$row"
    if [ "${#want[@]}" -gt 0 ] && [[ ! " ${want[*]} " == *" $plant "* ]]; then
        continue
    fi
    out="jepsen/runs/planted-$plant-$seed"
    rm -rf "$out"
    echo "planted: $plant (expect $checker): --nemesis $nemesis --net $net --duration $duration --seed $seed"
    status=0
    WEIR_PLANT=$plant "$bin/weir-jepsen" --weir "$bin/weir" --net "$net" --nemesis "$nemesis" \
        --duration "$duration" --seed "$seed" --out "$out" >"$out.log" 2>&1 || status=$?
    # verdict.txt's table: the checker's name in 12 columns (names hold spaces), then the
    # verdict.
    invalid=$(awk '/^checker/ {t = 1; next} t && substr($0, 14, 7) == "INVALID" {
        n = substr($0, 1, 12); sub(/ +$/, "", n); printf "%s,", n }' "$out/verdict.txt" 2>/dev/null)
    if [ "$checker" = "-" ]; then
        echo "planted: $plant is a known gap, not judged (exit $status; invalid: ${invalid:-none})"
    elif [ "$status" -eq 1 ] && [[ ",$invalid" == *",$checker,"* ]]; then
        echo "planted: $plant caught by $checker (invalid: $invalid)"
    else
        echo "planted: $plant NOT caught by $checker (exit $status; invalid: ${invalid:-none}; see $out)" >&2
        failed=$((failed + 1))
    fi
done
if [ "$failed" -gt 0 ]; then
    echo "planted: $failed plant(s) not caught by their checker" >&2
    exit 1
fi
echo "planted: every plant caught by its checker"
