#!/bin/bash
# Runs echo_server and echo_client the way a user does: separate processes, real sockets,
# checking exit codes and output. Prints one line per check; exits non-zero if any failed.
# Usage: echo_example_test.sh tcp|rdma ECHO_SERVER ECHO_CLIENT
#   tcp:  on 127.0.0.1, client forced to TCP
#   rdma: on $COVERBS_VM_IP, client forced to RDMA (run it through test/rdma-launcher)
usage_lines=2,6
# shellcheck source=test/examples/lib.sh
. "$(dirname "$0")/lib.sh"

# start_server ARGS...: sets server_pid and port, once the server says where it listens.
start_server() { launch "$work/server.log" "$server" --listen "$addr" --port 0 "$@"; }

# server_exits RC DESCRIPTION: the server ends by itself with RC.
server_exits() {
    finish "$server_pid"
    cp "$work/server.log" "$work/out"
    if [ "$rc" = "$1" ]; then pass "$2"; else fail "$2: exit $rc, expected $1"; fi
}

# log_has COUNT PATTERN DESCRIPTION: the server log has COUNT lines matching PATTERN.
log_has() {
    local n; n=$(grep -Ec -- "$2" "$work/server.log")
    cp "$work/server.log" "$work/out"
    if [ "$n" = "$1" ]; then pass "$3"; else fail "$3: $n lines match '$2', expected $1"; fi
}

# Parsing does not depend on the transport: checked once, where processes start fast.
if [ "$mode" = tcp ]; then
    echo "== command line"
    expect 0 "server --help" '^usage: echo_server' "$server" --help
    expect 0 "client --help" '^usage: echo_client' "$client" --help
    expect 2 "server bad option" "unknown option '--bogus'" "$server" --bogus
    expect 2 "client bad option" "unknown option '--bogus'" "$client" --connect "$addr:1" --bogus
    expect 2 "server port out of range" 'port number from 0 to 65535' "$server" --port 70000
    expect 2 "server bad address" 'IPv4 or IPv6 address' "$server" --listen 10.0.0.300
    expect 2 "server unknown transport" 'auto, rdma or tcp' "$server" --transport udp
    expect 2 "client without --connect" 'required' "$client"
    expect 2 "client bad address" 'HOST or HOST:PORT' "$client" --connect '[::1'
    expect 2 "client port out of range" 'port from 1 to 65535' "$client" --connect "$addr:65536"
    expect 2 "client port given twice" 'give the port once' "$client" --connect "$addr:1" --port 2
    # ::1:7000 is an IPv6 address and reads as ::1 port 7000 too: refused, not guessed.
    expect 2 "client IPv6 address and port without brackets" 'IPv6 address as \[ADDR\]:PORT' \
        "$client" --connect ::1:7000
    # .invalid never resolves (RFC 6761); the resolver's options bound a DNS wait.
    RES_OPTIONS="timeout:1 attempts:1" expect 1 "client unknown host" 'cannot resolve no-such-host.invalid' \
        "$client" --connect no-such-host.invalid
    expect 2 "client unknown transport" 'auto, rdma or tcp' "$client" --connect "$addr:1" --transport udp
    expect 2 "client zero messages" 'positive number' "$client" --connect "$addr:1" --messages 0
    # 16 × 64 MiB, 2 GiB with the replies (and 64M read as a size).
    expect 2 "client message memory over 1 GiB" 'connections times --size exceeds 512 MiB' \
        "$client" --connect "$addr:1" --connections 16 --size 64M
    expect 2 "client size past 64 MiB" 'number of bytes from 1 to 64 MiB' "$client" --connect "$addr:1" --size 65M
fi

echo "== echo over $mode"
start_server --connections "$(tcp && echo 6 || echo 5)"
log_has 1 "listening on .*:$port \(.*$mode.*\)" "server listens for $mode"
expect 0 "3 connections, 200 round trips of 1000 bytes" 'round trips/s, every reply matched' \
    "$client" --connect "$addr:$port" --transport "$mode" --connections 3 --messages 200 --size 1000
out_has "3 connection\(s\) to .* over $mode," "client reports $mode"
# A host name, and the port apart: every endpoint localhost resolves to is tried in turn (::1
# first on many systems, where this server does not listen). rdma_cm cannot use loopback.
if tcp; then
    expect 0 "a host name: --connect localhost --port N" 'every reply matched' \
        "$client" --connect localhost --port "$port" --transport tcp --connections 1 --messages 10
    out_has "1 connection\(s\) to localhost:$port over tcp," "client names the host it was given"
fi
out_has 'latency us: p50 [0-9.e+]+  p99 [0-9.e+]+  p99.9 [0-9.e+]+  max [0-9.e+]+$' "client reports percentiles"
# Messages far larger than the receive buffers in flight: a client that wrote before reading
# would stall here, which the client's reply timeout turns into a failure. The timeout is
# generous: in the emulated VM on a loaded host a 4 MiB round trip once took over 10 s.
expect 0 "2 connections, 4 round trips of 4 MiB" 'every reply matched' \
    "$client" --connect "$addr:$port" --transport "$mode" --connections 2 --messages 4 --size 4194304 \
    --timeout 30
served=$(tcp && echo 6 || echo 5)
server_exits 0 "server exits after --connections $served"
log_has "$served" "^echo_server: \[[0-9]\] .* connected over $mode$" "server logs $served connections over $mode"
log_has "$served" 'closed: echoed [0-9]+ bytes in .*\(client closed\)$' "server logs $served orderly ends"
log_has 1 "served $served connection\(s\)" "server summary"
expect 1 "client to a closed port" 'cannot connect to .*refused' \
    "$client" --connect "$addr:$port" --transport "$mode" --connections 2

echo "== failures and signals"
start_server
kill -STOP "$server_pid"  # alive but silent: connecting or the first reply must time out
expect 1 "client gives up on a stopped server" 'took longer than 2 s' \
    "$client" --connect "$addr:$port" --transport "$mode" --timeout 2
kill -KILL "$server_pid"  # a fresh server below: this one has the abandoned connection queued
kill -CONT "$server_pid"
wait "$server_pid" 2>/dev/null
start_server
"$client" --connect "$addr:$port" --transport "$mode" --connections 2 --messages 1000000000 >"$work/client.log" 2>&1 &
client_pid=$!
pids+=("$client_pid")
for _ in $(seq 300); do [ "$(grep -c ' connected over ' "$work/server.log")" -ge 2 ] && break; sleep 0.1; done
sleep 0.5
kill -TERM "$server_pid"
server_exits 0 "SIGTERM stops the server during a run"
log_has 1 'stopping \(SIGTERM\), closing 2 connection' "server says why it stops"
log_has 2 'closed: .*\(server stopping\)$' "server ends both sessions"
finish "$client_pid"
cp "$work/client.log" "$work/out"
if [ "$rc" = 1 ] && grep -q '^echo_client: connection [12]: ' "$work/out" && ! grep -q 'Operation canceled' "$work/out"
then pass "client reports the lost server"
else fail "client reports the lost server (not the write it cancelled): exit $rc"; fi
start_server
kill -INT "$server_pid"
server_exits 0 "SIGINT stops an idle server"

if tcp; then
    echo "== out of descriptors"
    # Connections past the server's descriptor limit wait in the listen backlog: the server says
    # so once and goes on serving, taking them in turn as others end, instead of exiting.
    launch "$work/server.log" prlimit --nofile=32 "$server" --listen "$addr" --port 0
    held=()
    for _ in $(seq 40); do exec {fd}<>"/dev/tcp/$addr/$port" && held+=("$fd"); done
    for _ in $(seq 50); do grep -q 'accept failed' "$work/server.log" && break; sleep 0.1; done
    for fd in "${held[@]}"; do exec {fd}>&-; done
    expect 0 "a client once the idle connections are gone" 'every reply matched' \
        "$client" --connect "$addr:$port" --connections 3 --messages 20
    # At least once: the backlog may run into the limit again while sessions are closing.
    check "server says connections wait" \
        "grep -q 'accept failed: Too many open files; new connections wait until some end$' '$work/server.log'"
    kill -TERM "$server_pid"
    server_exits 0 "the server kept serving"
    # Stopped while it waits for descriptors: still an orderly stop (not 'Bad file descriptor').
    launch "$work/server.log" prlimit --nofile=32 "$server" --listen "$addr" --port 0
    held=()
    for _ in $(seq 40); do exec {fd}<>"/dev/tcp/$addr/$port" && held+=("$fd"); done
    for _ in $(seq 50); do grep -q 'accept failed' "$work/server.log" && break; sleep 0.1; done
    kill -TERM "$server_pid"
    server_exits 0 "SIGTERM while out of descriptors stops the server cleanly"
    for fd in "${held[@]}"; do exec {fd}>&-; done
fi

summary
