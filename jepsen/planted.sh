#!/usr/bin/env bash
# Negative controls: builds `weir` and `weir-jepsen` with the test-only
# `planted` feature and copies the two binaries aside, then runs, for each planted bug, one
# short seeded harness run with `WEIR_PLANT=<name>` (read by `weir serve` and by the client
# library inside the harness). A plant passes when the run exits 1 AND its verdict marks
# the expected checker invalid; a plant that is not caught, or caught only by other
# checkers, fails the script. A plant marked "-" is a known gap (no run tells it from an
# unplanted one yet): it is named as NOT JUDGED and run only when asked for by name. The
# table of plants, checkers and runs is in jepsen/README.md.
#
# Usage: jepsen/planted.sh [PLANT...]   (default: every plant in the table below, less the
# space-separated names in PLANTED_SKIP)
set -uo pipefail
cd "$(dirname "$0")/.."

# The planted binaries are built in the workspace's own target dir, so every dependency
# built there already is reused and only the workspace's own crates (weir-core,
# weir-client, weir-server, weir, weir-jepsen) compile again (a target dir
# of its own would build every dependency a second time: minutes on 2 cores). They are
# copied to $bin and the default binaries built back (a relink from the cached default
# artifacts, well under a minute), so target/debug never keeps a planted build. CI, whose
# last step this is, skips the rebuild (PLANTED_RESTORE=0). `--examples` (the workspace has
# none) makes cargo resolve features as a test build does, with the dev-dependencies', so
# these binaries, the test plants' `cargo test --workspace` below and CI's `cargo test`
# share every dependency; without it each of the three compiles them all again.
bin=${PLANTED_BIN_DIR:-target/planted-bin}
cargo build --workspace --bins --examples --locked --features weir/planted || exit 1
mkdir -p "$bin"
cp target/debug/weir target/debug/weir-jepsen "$bin"/ || exit 1
if [ "${PLANTED_RESTORE:-1}" != 0 ]; then
    cargo build --workspace --bins --examples --locked || exit 1
fi

# plant | checker that must flag it ("-": a known gap, no run yet tells it from an unplanted
# run; run only when named, reported, never counted as caught; "test": a plant a cargo test
# catches rather than a partition run, the nemesis field naming the test binary of the
# `weir` crate and the net field the test's name filter) | nemesis | net | duration s
# | seed | environment of the run (optional: WEIR_TEST_CLOCK_RATE, which every node inherits
# and the harness records, so the checkers allow for it) | more harness options (optional,
# split on spaces, e.g. --fenced-ttl-ms 10000)
# (`python-told-late` and `forward-held` need WEIR_JEPSEN_PYTHON, or python3, to have this
# checkout's Python client installed, as CI's venv does: the harness's Python holders run it;
# `go-told-late` needs the `go` toolchain: the harness builds its Go holder with it;
# `ts-told-late` needs `node` and clients/typescript built, as CI's `npm ci` there does.)
plants=(
    "no-freeze|log clock|kill|loopback|30|3"
    "wall-gap|log clock|clock|loopback|20|1"
    "margin-zero|P1 permits|client-pause|loopback|40|1|WEIR_TEST_CLOCK_RATE=1.08|--fenced-ttl-ms 10000"
    "keepalive-arrival|P1 permits|client-delay|loopback|30|1"
    "fast-clock|log clock|delay|loopback|30|1"
    "reused-fence|P2 fences|delay|loopback|20|1"
    "settle-twice|settlement|kill|loopback|30|1||--snapshot-every 0"
    "halt-skipped|halts|delay|loopback|20|1"
    "expiry-no-grant|client kill|client-kill|loopback|30|1"
    "unsynced-log|settlement|power-loss|loopback|30|1||--snapshot-every 0"
    "unsynced-dir|settlement|power-loss|loopback|20|1"
    "unsynced-snapshot|snapshots|power-loss|loopback|15|7"
    "refused-charges-first|keyed|partition|loopback|20|1"
    "told-late|told|client-cut|loopback|30|1"
    "fast-clock-small|log clock|delay|loopback|30|1"
    "local-wall|convergence|delay|loopback|20|1"
    "keepalive-previous|stalls|pause|loopback|60|1"
    "halt-keeps-queue|halts|delay|loopback|20|1"
    "owner-skipped|test|cluster|owners::"
    "edge-unchecked|test|cluster|edge::every_argument_bound"
    "no-freeze-small|test|machine|scenarios::a_new_leaders_fast_clock_does_not_expire_leases_early"
    "python-told-late|told|client-pause|loopback|30|1||--python-holders 4"
    "cli-told-late|told|client-cut|loopback|30|1"
    "forward-held|kept|stall-then-kill|loopback|40|1||--python-holders 4"
    "go-told-late|told|client-pause|loopback|30|1||--go-holders 4"
    "ts-told-late|told|client-pause|loopback|30|1||--ts-holders 4"
    "lease-lapse-refund|leased|kill|loopback|20|1||--lease-holders 3"
    "lease-past-deadline|leased|client-cut|loopback|30|1||--lease-holders 3"
    "lease-renew-overlap|leased|kill|loopback|15|1||--lease-holders 3"
    "rls-lease-one-hit|leased|pause|loopback|20|1||--rls-holders 2"
)

want=("$@")
failed=0
gaps=0
mkdir -p jepsen/runs
for row in "${plants[@]}"; do
    IFS='|' read -r plant checker nemesis net duration seed extra options <<<"$row"
    if [ "${#want[@]}" -gt 0 ] && [[ ! " ${want[*]} " == *" $plant "* ]]; then
        continue
    fi
    # PLANTED_SKIP: plants judged elsewhere in this run (CI judges some in the simulator).
    if [[ " ${PLANTED_SKIP:-} " == *" $plant "* ]]; then
        echo "planted: $plant skipped here (PLANTED_SKIP: judged elsewhere)"
        continue
    fi
    if [ "$checker" = "-" ] && [ "${#want[@]}" -eq 0 ]; then
        echo "planted: $plant NOT JUDGED: a known gap, no checker tells it from an unplanted run yet (jepsen/README.md, \"Planted bugs\"); run it by name to see what it does"
        gaps=$((gaps + 1))
        continue
    fi
    if [ "$checker" = test ]; then
        # The test, built with the feature, run with the plant on in its nodes (they inherit
        # WEIR_PLANT); caught when a test fails (a build error is not a catch).
        out="jepsen/runs/planted-$plant.log"
        echo "planted: $plant (expect cargo test --test $nemesis $net to fail)"
        started=$SECONDS
        WEIR_PLANT="$plant" cargo test --locked --workspace --features weir/planted --test "$nemesis" "$net" >"$out" 2>&1
        status=$?
        tested=1
        if [ "$status" -ne 0 ] && grep -q '^test result: FAILED' "$out"; then
            echo "planted: $plant caught by test (failed: $(grep -c '\.\.\. FAILED$' "$out"); $((SECONDS - started)) s)"
        else
            echo "planted: $plant NOT caught by the test (exit $status; see $out)" >&2
            failed=$((failed + 1))
        fi
        continue
    fi
    # A seeded run replays its fault schedule, not its timing: on a loaded machine a plant
    # whose catch needs a chance event (a retried settle, an acquire inside a halt) can miss
    # once. PLANTED_TRIES runs (default 1) are allowed; every miss is printed.
    tries=${PLANTED_TRIES:-1}
    for try in $(seq 1 "$tries"); do
        out="jepsen/runs/planted-$plant-$seed"
        [ "$try" -gt 1 ] && out="$out-try$try"
        rm -rf "$out"
        echo "planted: $plant (expect $checker): ${extra:+$extra }--nemesis $nemesis --net $net --duration $duration --seed $seed${options:+ $options} (run $try of at most $tries)"
        status=0
        started=$SECONDS
        # shellcheck disable=SC2086 # $options is a list of words on purpose
        env ${extra:+"$extra"} WEIR_PLANT="$plant" "$bin/weir-jepsen" --weir "$bin/weir" --net "$net" --nemesis "$nemesis" \
            --duration "$duration" --seed "$seed" --out "$out" ${options} >"$out.log" 2>&1 || status=$?
        # verdict.txt's table: the checker's name in 12 columns (names hold spaces), then the
        # verdict.
        invalid=$(awk '/^checker/ {t = 1; next} t && substr($0, 14, 7) == "INVALID" {
            n = substr($0, 1, 12); sub(/ +$/, "", n); printf "%s,", n }' "$out/verdict.txt" 2>/dev/null)
        if [ "$checker" = "-" ]; then
            echo "planted: $plant is a known gap, not judged (exit $status; invalid: ${invalid:-none})"
            break
        elif [ "$status" -eq 1 ] && [[ ",$invalid" == *",$checker,"* ]]; then
            echo "planted: $plant caught by $checker (invalid: $invalid; $((SECONDS - started)) s; run $try)"
            break
        elif [ "$try" -lt "$tries" ]; then
            echo "planted: $plant missed by $checker in run $try (exit $status; invalid: ${invalid:-none}; see $out); running it again"
        else
            echo "planted: $plant NOT caught by $checker (exit $status; invalid: ${invalid:-none}; $tries run(s); see $out)" >&2
            failed=$((failed + 1))
        fi
    done
done
# The test's build left a planted `weir` in target/debug (its CARGO_BIN_EXE_weir): build the
# default one back, as above.
if [ "${tested:-0}" = 1 ] && [ "${PLANTED_RESTORE:-1}" != 0 ]; then
    cargo build --workspace --bins --examples --locked || exit 1
fi
if [ "$failed" -gt 0 ]; then
    echo "planted: $failed plant(s) not caught by their checker: a checker that cannot see the bug it exists for" >&2
    exit 1
fi
if [ "$gaps" -gt 0 ]; then
    echo "planted: every judged plant caught by its checker; $gaps known gap(s) not judged"
else
    echo "planted: every plant caught by its checker"
fi
