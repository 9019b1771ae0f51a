#!/bin/bash
# Every program answers --help with its usage (exit 0), and a bad command line with two lines,
# one naming the program and the problem, then a pointer to --help (exit 2), before it touches
# a device or the network. The benchmarks that listen name the address they could not use.
# Usage: command_lines_test.sh PROGRAM...
# Where the programs are given together, also what their options promise once they run, over
# TCP on 127.0.0.1: list options refuse empty lists and elements; kv_client takes '--' and
# points to it where an option after the command may have been meant as a KEY or VALUE; what
# the clients report (nearest-rank percentiles, progress off a terminal, a lost server named as
# such); file_server's send buffers; bench/run's and bench/file_transfer_bench's command lines.
[ $# -gt 0 ] || { sed -n '2,5s/^# //p' "$0" >&2; exit 2; }
root=$(cd "$(dirname "$0")/../.." && pwd)
failed=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=1; }
out=$(mktemp)
work=$(mktemp -d)
pids=()
# shellcheck disable=SC2317 # runs from the EXIT trap
cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    rm -rf "$out" "$work"
}
trap cleanup EXIT
show() { tr '\n' '|' <"$out"; }
# refused DESCRIPTION MESSAGE PROGRAM ARGS...: PROGRAM exits 2 with two lines, "NAME: MESSAGE" and
# the pointer to --help.
refused() {
    local what=$1 message=$2 program=$3 name rc; shift 3
    name=$(basename "$program")
    timeout 20 "$program" "$@" >"$out" 2>&1
    rc=$?
    if [ $rc = 2 ] && [ "$(wc -l <"$out")" = 2 ] && [ "$(head -1 "$out")" = "$name: $message" ] &&
        grep -qx "Try '$name --help' for the options." "$out"; then pass "$name $what"
    else fail "$name $what: exit $rc, output '$(show)'"; fi
}
# list_refused PROGRAM OPTION VALUE TAKES: PROGRAM OPTION VALUE (with --quick, so that a program
# that takes it runs briefly) is refused: "OPTION takes TAKES, not 'VALUE'".
list_refused() {
    refused "$2 '$3' is refused" "$2 takes $4, not '$3'" "$1" --quick "$2" "$3"
}
sizes="a comma-separated list of sizes from 1 to 67108864"
counts="a comma-separated list of connection counts from 1 to 1024"
declare -A given  # the programs by name
for program in "$@"; do
    name=$(basename "$program")
    given[$name]=$program
    timeout 5 "$program" --help >"$out" 2>&1
    rc=$?
    if [ $rc = 0 ] && head -1 "$out" | grep -q "^usage: $name "; then pass "$name --help"
    else fail "$name --help: exit $rc, first line '$(head -1 "$out")'"; fi
    for bad in --no-such-option "--help-me"; do
        timeout 5 "$program" "$bad" >"$out" 2>&1
        rc=$?
        if [ $rc = 2 ] && [ "$(wc -l <"$out")" = 2 ] && grep -q "^$name: unknown option '$bad'" "$out" &&
            grep -qx "Try '$name --help' for the options." "$out"; then pass "$name $bad"
        else fail "$name $bad: exit $rc, output '$(show)'"; fi
    done
    case $name in echo_server | echo_client | kv_server | file_server | pingpong | *_bench | asio_baseline)
        # They take no operands: a stray word is not an option, and is not called one.
        refused "with a stray word" "unexpected argument 'extra'" "$program" extra
    esac
    case $name in pingpong_bench | stream_bench)
        # 192.0.2.1 (TEST-NET-1) is no address of this machine.
        timeout 20 "$program" --address 192.0.2.1 --quick >"$out" 2>&1
        rc=$?
        if [ $rc = 1 ] && grep -q "^$name: cannot listen on 192.0.2.1 (tcp): " "$out"; then
            pass "$name names the address it cannot listen on"
        else fail "$name --address 192.0.2.1: exit $rc, output '$(show)'"; fi
    esac
    # An empty list, or an empty element, would run fewer cases or none (or crash), and exit 0.
    case $name in
        pingpong_bench)
            list_refused "$program" --sizes '' "$sizes"
            list_refused "$program" --sizes 64, "$sizes"
            list_refused "$program" --sizes 4K,,64K "$sizes"
            list_refused "$program" --ops '' "a comma-separated list of send, read, write"
            list_refused "$program" --modes '' "a comma-separated list of event, busy, adaptive" ;;
        stream_bench)
            list_refused "$program" --patterns '' "a comma-separated list of stream, echo"
            list_refused "$program" --sizes 64, "$sizes"
            list_refused "$program" --echo-connections '' "$counts" ;;
        asio_baseline)
            list_refused "$program" --patterns '' "a comma-separated list of pingpong, stream, echo"
            list_refused "$program" --sizes '' "$sizes"
            list_refused "$program" --stream-sizes 4K, "$sizes"
            list_refused "$program" --echo-connections ,1 "$counts" ;;
    esac
done

# start_server LOG PROGRAM ARGS...: runs a server on 127.0.0.1, port chosen by the system; sets
# server_pid and port once LOG says where it listens (false if it never does).
start_server() {
    local log=$1; shift
    "$@" --listen 127.0.0.1 --port 0 >"$log" 2>&1 &
    server_pid=$!
    pids+=("$server_pid")
    port=$("$root/scripts/listen-port" "$log" "$server_pid" 30)
}
stop_server() { kill -KILL "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null; }
# wait_for FILE PATTERN [SECONDS]: true once FILE has a line matching PATTERN (default 20 s).
wait_for() {
    for _ in $(seq $((${3:-20} * 10))); do grep -Eq -- "$2" "$1" && return 0; sleep 0.1; done
    return 1
}
# in_order A B: true if the numbers A and B are equal or A is the smaller.
in_order() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 <= b + 0) }'; }

# ---- pingpong_bench: nearest-rank percentiles ----------------------------------------------
# Of 2 samples, p50 is the smaller and p99 the larger one: one size at least shows them apart
# (rounding p·(n-1) gave p50 = p99, the larger, for every size).
if [ -n "${given[pingpong_bench]:-}" ]; then
    timeout 60 "${given[pingpong_bench]}" --transport tcp --iterations 2 --warmup 0 --sizes 64,128,256,512 \
        >"$out" 2>&1
    rc=$?
    apart=$(awk -F, '$1 == "csv" && $8 == "p50_us" { p50[$6] = $9 } $1 == "csv" && $8 == "p99_us" { p99[$6] = $9 }
        END { for (s in p50) { if (p50[s] + 0 > p99[s] + 0) { print "inverted"; exit } if (p50[s] != p99[s]) n++ } print n + 0 }' "$out")
    if [ $rc = 0 ] && [ "$apart" != inverted ] && [ "$apart" -gt 0 ]; then
        pass "pingpong_bench: p50 and p99 of 2 samples are the smaller and the larger"
    else fail "pingpong_bench --iterations 2: exit $rc, p50 below p99 in $apart sizes, output '$(show)'"; fi
fi

# ---- echo_client: percentiles, progress off a terminal -------------------------------------
if [ -n "${given[echo_server]:-}" ] && [ -n "${given[echo_client]:-}" ]; then
    if start_server "$work/echo_server.log" "${given[echo_server]}" --transport tcp; then
        echo_client=("${given[echo_client]}" --connect "127.0.0.1:$port" --transport tcp --connections 1)
        # Nearest rank: p99 and p99.9 of 2 round trips are the larger one, the maximum.
        timeout 30 "${echo_client[@]}" --messages 2 >"$out" 2>&1
        rc=$?
        read -r p50 p99 p999 max < <(sed -n \
            's/^echo_client: latency us: p50 \([0-9.]*\)  p99 \([0-9.]*\)  p99.9 \([0-9.]*\)  max \([0-9.]*\)$/\1 \2 \3 \4/p' "$out")
        if [ $rc = 0 ] && [ -n "${max:-}" ] && [ "$p99" = "$max" ] && [ "$p999" = "$max" ] && in_order "$p50" "$p99"; then
            pass "echo_client: p99 and p99.9 of 2 round trips are the larger one"
        else fail "echo_client --messages 2: exit $rc, output '$(show)'"; fi
        # Progress lines go to stderr every few seconds when stdout is no terminal; stdout keeps
        # only the lines scripts read.
        "${echo_client[@]}" --messages 1000000000 >"$work/echo.out" 2>"$work/echo.err" &
        client=$!
        pids+=("$client")
        progress='^echo_client: [0-9.]+ s: [0-9]+ of 1000000000 round trips \([0-9]+%\), [0-9]+/s$'
        if wait_for "$work/echo.err" "$progress" 20 && ! grep -Eq "$progress" "$work/echo.out"; then
            pass "echo_client shows its progress on stderr off a terminal"
        else fail "echo_client progress: stdout '$(tr '\n' '|' <"$work/echo.out")', stderr '$(tr '\n' '|' <"$work/echo.err")'"; fi
        kill -KILL "$client" 2>/dev/null
        wait "$client" 2>/dev/null
        stop_server
    else fail "echo_server did not start: '$(tr '\n' '|' <"$work/echo_server.log")'"; fi
fi

# ---- kv_client: '--', percentiles, progress, a lost server ---------------------------------
if [ -n "${given[kv_server]:-}" ] && [ -n "${given[kv_client]:-}" ]; then
    if start_server "$work/kv_server.log" "${given[kv_server]}" --transport tcp; then
        kv=("${given[kv_client]}" --connect "127.0.0.1:$port" --transport tcp)
        # kv_client check DESCRIPTION RC LINE ARGS...: kv_client ARGS exits RC and prints LINE.
        kv_check() {
            local what=$1 want=$2 line=$3 rc; shift 3
            timeout 30 "${kv[@]}" "$@" >"$out" 2>&1
            rc=$?
            if [ $rc = "$want" ] && grep -qxF -- "$line" "$out"; then pass "kv_client $what"
            else fail "kv_client $what: exit $rc, output '$(show)'"; fi
        }
        kv_check "put k -- -h: a value after '--'" 0 "kv_client: stored 'k' (2 bytes)" put k -- -h
        kv_check "get -- k" 0 "-h" get -- k
        kv_check "-- put -k --x: a key and a value that look like options" 0 "kv_client: stored '-k' (3 bytes)" \
            -- put -k --x
        kv_check "get -- -k" 0 "--x" get -- -k
        # Options are read after the command too (bench --ops N, get --two-sided KEY), so there
        # -h is the help and '--x' an option; the help and the errors point to '--'.
        dash_dash="a KEY or VALUE that begins with '-' goes after '--'"
        kv_check "an option before '--' still is one, and the error names '--'" 2 \
            "kv_client: unknown option '--x' ($dash_dash)" put k --x
        kv_check "put k --two-sided: the error names the option and '--'" 2 \
            "kv_client: put takes 2 argument(s); '--two-sided' was read as an option: $dash_dash" \
            put k --two-sided
        kv_check "put h -h shows the help, which says how to store '-h'" 0 \
            "                       stores '-h' (put KEY -h shows this help)" put h -h
        kv_check "put h -h stores nothing" 1 "kv_client: not found: h" get h

        # Nearest rank: of 2 GETs each way, p50 is the faster and p99 the slower one, so one row
        # at least shows them apart (rounding down gave p99 = p50, the faster, in both).
        timeout 30 "${kv[@]}" bench --ops 2 --keys 1 >"$out" 2>&1
        rc=$?
        apart=$(awk '/^kv_client: (one|two)-sided / { rows++; if ($3 + 0 > $4 + 0) { print "inverted"; exit } if ($3 != $4) n++ }
            END { print rows == 2 ? n + 0 : "no rows" }' "$out")
        if [ $rc = 0 ] && [ "$apart" -gt 0 ] 2>/dev/null; then pass "kv_client bench: p50 and p99 of 2 GETs"
        else fail "kv_client bench --ops 2: exit $rc, rows with p50 below p99: $apart, output '$(show)'"; fi

        # A long stress run shows its progress on stderr; then the server dies under it.
        "${kv[@]}" stress --seconds 120 >"$work/kv.out" 2>"$work/kv.err" &
        client=$!
        pids+=("$client")
        progress='^kv_client: stress: [0-9.]+ s: [0-9]+ operations, [0-9]+/s$'
        if wait_for "$work/kv.err" "$progress" 20 && ! grep -Eq "$progress" "$work/kv.out"; then
            pass "kv_client stress shows its progress on stderr off a terminal"
        else fail "kv_client stress progress: stdout '$(tr '\n' '|' <"$work/kv.out")', stderr '$(tr '\n' '|' <"$work/kv.err")'"; fi
        stop_server
        # Over TCP too, one-sided GETs in flight used to end in "RDMA work completion: transport
        # retry counter exceeded", which names neither what happened nor the transport.
        for _ in $(seq 300); do kill -0 "$client" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$client" 2>/dev/null
        wait "$client"
        rc=$?
        if [ $rc = 1 ] && grep -qx 'kv_client: lost the server: it closed the connection (over tcp)' "$work/kv.err"; then
            pass "kv_client says the server closed the connection, over tcp"
        else fail "kv_client, server killed: exit $rc, stderr '$(tr '\n' '|' <"$work/kv.err")'"; fi
    else fail "kv_server did not start: '$(tr '\n' '|' <"$work/kv_server.log")'"; fi
fi

# ---- file_server: send buffers sized by the file, within --send-memory ---------------------
# The client chooses the window the server sends into: a 1-byte file into 24 slots of 4 MiB
# took the server's send buffers to 26 × 4 MiB (VmHWM over 100 MB).
hwm() { sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB$/\1/p' "/proc/$1/status"; }
if [ -n "${given[file_server]:-}" ] && [ -n "${given[file_client]:-}" ] && [ -r /proc/self/status ]; then
    mkdir -p "$work/served" "$work/fetched"
    printf x >"$work/served/one"
    head -c $((6 << 20)) /dev/urandom >"$work/served/six"
    fetch() {  # fetch NAME WINDOW SLOT_SIZE: file_client fetches NAME into $work/fetched
        timeout 60 "${given[file_client]}" --connect "127.0.0.1:$port" --transport tcp --window "$2" \
            --slot-size "$3" fetch "$1" --to "$work/fetched" >"$out" 2>&1
    }
    if start_server "$work/file_server.log" "${given[file_server]}" --dir "$work/served" --transport tcp; then
        fetch one 24 4194304
        rc=$? kb=$(hwm "$server_pid")
        if [ $rc = 0 ] && cmp -s "$work/served/one" "$work/fetched/one" && [ "${kb:-999999}" -lt $((48 << 10)) ]; then
            pass "file_server sends a 1-byte file into a 96 MiB window from little memory (VmHWM $kb kB)"
        else fail "file_server, 1 byte into 24 slots of 4 MiB: exit $rc, VmHWM ${kb:-?} kB, output '$(show)'"; fi
        stop_server
    else fail "file_server did not start: '$(tr '\n' '|' <"$work/file_server.log")'"; fi
    # Within --send-memory 1M the server sends 1 MiB at a time, each WRITE filling part of a slot.
    if start_server "$work/file_server.log" "${given[file_server]}" --dir "$work/served" --transport tcp \
        --send-memory 1M; then
        fetch six 16 4194304
        rc=$? kb=$(hwm "$server_pid")
        if [ $rc = 0 ] && cmp -s "$work/served/six" "$work/fetched/six" && [ "${kb:-999999}" -lt $((48 << 10)) ]; then
            pass "file_server --send-memory 1M sends 6 MiB into 4 MiB slots intact (VmHWM $kb kB)"
        else fail "file_server --send-memory 1M: exit $rc, VmHWM ${kb:-?} kB, output '$(show)'"; fi
        stop_server
    else fail "file_server --send-memory 1M did not start: '$(tr '\n' '|' <"$work/file_server.log")'"; fi
    refused "--send-memory 1K is refused" "--send-memory takes a number from 4096 to 1099511627776, not '1K'" \
        "${given[file_server]}" --dir "$work/served" --send-memory 1K
fi

# ---- bench/file_transfer_bench and bench/run -----------------------------------------------
# expect_script DESCRIPTION RC LINE CMD...: CMD exits RC, and LINE is a line of its output.
expect_script() {
    local what=$1 want=$2 line=$3 rc; shift 3
    timeout 120 "$@" >"$out" 2>&1
    rc=$?
    if [ $rc = "$want" ] && grep -qxF -- "$line" "$out"; then pass "$what"
    else fail "$what: exit $rc, output '$(show)'"; fi
}
# The scripts the README starts with take no arguments but --help: anything else is refused
# before they install or build anything (scripts/test would otherwise run for half an hour).
for script in demo test install-deps rdma-address; do
    expect_script "scripts/$script refuses an unknown argument" 2 "$script: unknown argument '--bogus'" \
        "$root/scripts/$script" --bogus
done
ftb=$root/bench/file_transfer_bench
expect_script "file_transfer_bench without arguments: usage, exit 2" 2 \
    "Usage: bench/file_transfer_bench BUILD_DIR ADDR MIB [REPS] [file_client options...]" "$ftb"
expect_script "file_transfer_bench --help: exit 0" 0 \
    "Usage: bench/file_transfer_bench BUILD_DIR ADDR MIB [REPS] [file_client options...]" "$ftb" --help
expect_script "file_transfer_bench REPS 0 is refused" 2 "file_transfer_bench: REPS must be a positive number" \
    "$ftb" "$work" 127.0.0.1 1 0
# The build directory the examples were given from: file_transfer_bench and bench/run take one.
examples_build=
if [ -n "${given[file_server]:-}" ] && [ -n "${given[file_client]:-}" ]; then
    examples_build=$(cd "$(dirname "${given[file_server]}")/.." && pwd)
    [ "$examples_build/examples/file_client" -ef "${given[file_client]}" ] || examples_build=
fi
if [ -n "$examples_build" ]; then
    # Options right after MIB are file_client's: only a number is REPS.
    timeout 120 "$ftb" "$examples_build" 127.0.0.1 1 --transport tcp >"$out" 2>&1
    rc=$?
    if [ $rc = 0 ] && grep -q '^csv,file,coverbs,tcp,-,1048576,1,mib_s,[0-9.]*$' "$out"; then
        pass "file_transfer_bench BUILD ADDR MIB --transport tcp: one run, its figure"
    else fail "file_transfer_bench BUILD ADDR MIB --transport tcp: exit $rc, output '$(show)'"; fi
fi

run=$root/bench/run
expect_script "bench/run --build without a value is refused" 2 "bench/run: --build needs a value" "$run" --build
expect_script "bench/run --build '' is refused" 2 "bench/run: --build needs a value" "$run" --build ''
expect_script "bench/run refuses fewer latency samples than perftest takes" 2 \
    "bench/run: --lat-iterations takes a number of at least 5 (perftest's least)" "$run" --lat-iterations 3
expect_script "bench/run names the build directory it cannot find" 2 \
    "bench/run: no build directory '$work/no-build'" "$run" --build "$work/no-build"
# A build whose benchmarks all fail (exit 3): bench/run reports each with its exit status.
mkdir -p "$work/fake-build/bench" "$work/fake-build/examples"
for p in bench/pingpong_bench bench/stream_bench bench/asio_baseline bench/verbs_ops_bench \
    examples/file_server examples/file_client; do
    printf '#!/bin/sh\nexit 3\n' >"$work/fake-build/$p"
    chmod +x "$work/fake-build/$p"
done
# A build with the benchmarks and not the examples, which the file benchmark runs.
mkdir -p "$work/bench-only/bench"
cp "$work/fake-build/bench/"* "$work/bench-only/bench/"
expect_script "bench/run names a program it needs and cannot find" 2 \
    "bench/run: $work/bench-only/examples/file_server is missing: build the bench and examples targets first" \
    "$run" --quick --build "$work/bench-only"
: >"$work/fake-build/CMakeCache.txt"
timeout 120 "$run" --quick --part tcp --build "$work/fake-build" --out "$work/fake-out" >"$out" 2>&1
rc=$?
if [ $rc = 1 ] && grep -qx "bench/run: FAILED (exit 3): $work/fake-build/bench/pingpong_bench --transport tcp --quick" "$out"; then
    pass "bench/run reports a failed benchmark's exit status"
else fail "bench/run with failing benchmarks: exit $rc, output '$(show)'"; fi
# A quick run that passes removes its temporary directory: its last line must not name it.
bench_build=
if [ -n "${given[pingpong_bench]:-}" ] && [ -n "$examples_build" ]; then
    bench_build=$(cd "$(dirname "${given[pingpong_bench]}")/.." && pwd)
    for p in stream_bench asio_baseline verbs_ops_bench; do
        [ -n "${given[$p]:-}" ] && [ "$bench_build/bench/$p" -ef "${given[$p]}" ] || bench_build=
    done
    [ "$bench_build" = "$examples_build" ] || bench_build=
fi
if [ -n "$bench_build" ]; then
    timeout 240 "$run" --quick --part tcp --build "$bench_build" >"$work/run.out" 2>"$out"
    rc=$?
    last=$(tail -n1 "$out")
    gone=
    for word in $last; do
        word=${word%;}
        case $word in /*) [ -e "$word" ] || gone="$gone $word" ;; esac
    done
    if [ $rc = 0 ] && [[ $last == "bench/run: done in "* ]] && [ -z "$gone" ]; then
        pass "bench/run --quick names no directory it removed"
    else fail "bench/run --quick: exit $rc, last line '$last', removed:$gone"; fi
    # The report from a quick run's results, kept this time (--out).
    timeout 240 "$run" --quick --part tcp --build "$bench_build" --out "$work/quick-out" >/dev/null 2>"$out"
    report() { python3 "$root/bench/report.py" --out "$work/quick-out" --md "$work/r.md" --png "$work/r.png" "$@"; }
    # A full report is made only of parts that full runs finished: these are a quick run's, and
    # no RDMA part ran at all.
    report --parts tcp >"$out" 2>&1
    rc=$?
    if [ $rc = 1 ] && grep -q "tcp: its results in $work/quick-out are a quick run's" "$out" &&
        grep -q "rdma: no finished run of this part" "$out"; then
        pass "a full report refuses a quick run's part and a missing one"
    else fail "a full report from a quick run's tcp part: exit $rc, output '$(show)'"; fi
    # Allocations have an absolute target: one repetition that allocated misses it.
    sed -n 's/^1,\(pingpong,coverbs,tcp,-,64,1,\)allocs_per_rt,.*/2,\1allocs_per_rt,0.5/p' \
        "$work/quick-out/tcp.csv" >>"$work/quick-out/tcp.csv"
    report --parts tcp --quick >"$out" 2>&1
    if grep -q "^| ping-pong 64 B, heap allocations per round trip | 0.5 .*| \*\*no\*\* |$" "$work/r.md"; then
        pass "an allocation count is met only when no repetition allocated"
    else fail "allocations in one repetition of two: '$(grep "heap allocations" "$work/r.md")'"; fi
fi
exit $failed
