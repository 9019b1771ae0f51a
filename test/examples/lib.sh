# What the example tests share (sourced): the mode and address, a work directory cleaned up
# with every process started, and the checks that print one PASS/FAIL line each.
# Before sourcing: usage_lines (the sed range of the caller's usage text), and optionally
# expect_limit (seconds a command may take, default 60), finish_limit (seconds a process may
# take to end, default 30), fail_tail (output lines a failure shows, default all).
# After: mode server client addr work pids failed; tcp() is true in tcp mode.
# shellcheck shell=bash disable=SC2034,SC2317 # variables for the caller; functions run from traps
set -uo pipefail
[ $# -ge 3 ] || { sed -n "${usage_lines}s/^# //p" "$0" >&2; exit 2; }
mode=$1 server=$2 client=$3
case $mode in
    tcp) addr=127.0.0.1 ;;
    rdma) addr=${COVERBS_VM_IP:?"needs COVERBS_VM_IP: run it through test/rdma-launcher"} ;;
    *) echo "unknown mode '$mode'" >&2; exit 2 ;;
esac
tcp() { [ "$mode" = tcp ]; }
listen_port=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../scripts" && pwd)/listen-port
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
    chmod -R u+rwx "$work" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
failed=0 start=$SECONDS

last=${EPOCHREALTIME/./}
stamp() {  # sets took: the time since the previous check, in seconds with one decimal
    local now=${EPOCHREALTIME/./}
    local d=$(((now - last) / 100000))
    last=$now took="$((d / 10)).$((d % 10)) s"
}
pass() { stamp; echo "PASS $1 ($took)"; }
fail() {
    stamp; echo "FAIL $1 ($took)"
    [ ! -s "$work/out" ] || sed 's/^/    | /' "$work/out" | tail -n "${fail_tail:-+1}"
    tcp || device_counters
    failed=1
}
# The RDMA device's counters that are not zero: retransmissions, RNR NAKs and drops tell a lost
# packet from a program that stalled (rdma_echo_example_test once waited 10 s for a reply).
device_counters() {
    command -v rdma >/dev/null || return 0
    rdma statistic show 2>/dev/null |
        awk '{ s = $1 " " $2; for (i = 3; i < NF; i += 2) if ($(i + 1) != 0) s = s " " $i "=" $(i + 1); print "    device: " s }'
}
check() { if eval "$2"; then pass "$1"; else fail "$1"; fi; }  # check DESCRIPTION SHELL-CONDITION

# expect RC DESCRIPTION PATTERN CMD...: CMD exits with RC (within expect_limit) and prints PATTERN.
expect() {
    local want=$1 what=$2 pattern=$3; shift 3
    timeout -k 5 "${expect_limit:-60}" "$@" >"$work/out" 2>&1
    local rc=$?
    if [ $rc != "$want" ]; then fail "$what: exit $rc, expected $want"; else out_has "$pattern" "$what"; fi
}
# out_has PATTERN DESCRIPTION: the last command's output has a line matching PATTERN.
out_has() { if grep -Eq -- "$1" "$work/out"; then pass "$2"; else fail "$2: no line matching '$1'"; fi; }

# launch LOG CMD...: starts a server, sets server_pid and port once its LOG says where it
# listens; a server that never does fails the test.
launch() {
    local log=$1; shift
    # Emptied here, not by the child's redirection: that may run after listen-port has read
    # the previous server's line from a reused LOG, and the client would dial a dead port.
    : >"$log"
    "$@" >>"$log" 2>&1 &
    server_pid=$!
    pids+=("$server_pid")
    port=$("$listen_port" "$log" "$server_pid") || {
        cp "$log" "$work/out"; fail "server did not report its port"; exit 1
    }
}

# finish PID: sets rc to PID's exit status once it ends, or to "hung" (and kills it) after
# finish_limit seconds.
finish() {
    for _ in $(seq $((${finish_limit:-30} * 10))); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$1" 2>/dev/null; then kill -KILL "$1"; wait "$1" 2>/dev/null; rc=hung; return; fi
    wait "$1" 2>/dev/null
    rc=$?
}

# summary: the last line, and the exit status.
summary() {
    echo "== $mode: $([ $failed = 0 ] && echo passed || echo FAILED) in $((SECONDS - start)) s"
    exit $failed
}
