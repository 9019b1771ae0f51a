#!/bin/bash
# Runs kv_server and kv_client as a user does: separate processes, real sockets, checking exit
# codes and output. Prints one line per check; exits non-zero if any failed.
# Usage: kv_example_test.sh tcp|rdma KV_SERVER KV_CLIENT
#   tcp:  on 127.0.0.1, client forced to TCP
#   rdma: on $COVERBS_VM_IP, client forced to RDMA (run it through test/rdma-launcher)
usage_lines=2,6
# shellcheck source=test/examples/lib.sh
. "$(dirname "$0")/lib.sh"

# start_server ARGS...: sets server_pid, port and kv (the client command for this server and
# transport), once the server says where it listens.
start_server() {
    launch "$work/server.log" "$server" --listen "$addr" --port 0 "$@"
    kv=("$client" --connect "$addr" --port "$port" --transport "$mode")
}
log_has() {  # log_has PATTERN DESCRIPTION: the server log has a line matching PATTERN
    cp "$work/server.log" "$work/out"
    out_has "$1" "$2"
}
# number PATTERN: the first number captured by PATTERN (sed -E, one group) in the last output.
number() { sed -nE "s/.*$1.*/\1/p" "$work/out" | head -n1; }

if [ "$mode" = tcp ]; then
    echo "== command line"
    expect 0 "server --help" '^usage: kv_server' "$server" --help
    expect 0 "client --help" '^usage: kv_client' "$client" --help
    expect 2 "server bad option" "unknown option '--bogus'" "$server" --bogus
    expect 2 "server zero slots" 'slots from 1 to' "$server" --slots 0
    expect 2 "server table over 4 GiB" 'exceed 4 GiB: 16777216 slots of [0-9]+ bytes; use fewer --slots' \
        "$server" --slots 16777216
    expect 2 "client without --connect" '--connect HOST\[:PORT\] is required' "$client" get k
    expect 2 "client without a command" 'no command' "$client" --connect "$addr"
    expect 2 "client unknown command" "unknown command 'fetch'" "$client" --connect "$addr" fetch k
    expect 2 "client put without a value" 'put takes 2 argument' "$client" --connect "$addr" put k
    expect 2 "client bad port" 'port number from 1 to 65535' "$client" --connect "$addr" --port 0 get k
    expect 2 "client unknown transport" 'auto, rdma or tcp' "$client" --connect "$addr" --transport udp get k
    expect 2 "client port given twice" 'give the port once' "$client" --connect "$addr:7100" --port 7100 get k
    expect 2 "client bad malformed kind" 'bad-request takes short' \
        "$client" --connect "$addr" bad-request nonsense
    expect 2 "stress value too small" 'at least 32 bytes' "$client" --connect "$addr" stress --value-size 8

    echo "== a full table"
    start_server --slots 2 --probes 1
    expect 0 "put into the only slot" "stored 'a' \(1 byte\)$" "${kv[@]}" put a 1
    collide=$(for k in b c d e f g h i j; do
        "${kv[@]}" put "$k" 1 >/dev/null 2>&1 || { echo "$k"; break; }; done)
    expect 1 "a colliding key finds the table full" 'table full: all 1 slots' "${kv[@]}" put "$collide" 1
    # A host name with the port in it, as echo_client takes it: the same value comes back.
    expect 0 "get from localhost:PORT" '^1$' "$client" --connect "localhost:$port" --transport tcp get a
    kill -TERM "$server_pid"; finish "$server_pid"
fi

echo "== put, get, del over $mode"
# Every put holds its slot odd for 2 ms, so that one-sided GETs meet writes in progress.
start_server --slots 256 --write-window-us 2000
log_has "listening on .*:$port \(.*$mode.*\)" "server listens for $mode"
expect 0 "put" "stored 'greeting' \(11 bytes\)" "${kv[@]}" put greeting "hello world"
expect 0 "get one-sided" '^hello world$' "${kv[@]}" get greeting
expect 0 "del" "deleted 'greeting'" "${kv[@]}" del greeting
expect 1 "get after del" '^kv_client: not found: greeting$' "${kv[@]}" get greeting
# Client processes start slowly in the emulated VM: what does not depend on the transport, or
# is covered by the bench (two-sided GET), is checked on TCP only.
if [ "$mode" = tcp ]; then
    expect 0 "put again" "stored 'greeting'" "${kv[@]}" put greeting "hello world"
    expect 0 "get two-sided" '^hello world$' "${kv[@]}" get --two-sided greeting
    expect 0 "overwrite" "stored 'greeting'" "${kv[@]}" put greeting "bye"
    expect 0 "get sees the new value" '^bye$' "${kv[@]}" get greeting
    expect 0 "del again" "deleted 'greeting'" "${kv[@]}" del greeting
    expect 1 "get two-sided after del" '^kv_client: not found: greeting$' "${kv[@]}" get --two-sided greeting
    expect 1 "del of a missing key" '^kv_client: not found: greeting$' "${kv[@]}" del greeting
    expect 1 "get of a key never stored" '^kv_client: not found: nobody$' "${kv[@]}" get nobody
    expect 1 "key longer than the server takes" 'keys of 1 to 64 bytes, not 65' \
        "${kv[@]}" get "$(printf 'k%.0s' $(seq 65))"
fi
log_has "connected over $mode$" "server logs connections over $mode"

echo "== bench over $mode"
expect 0 "bench" 'one-sided: 200 slot reads, 0 retries' "${kv[@]}" bench --ops 200 --keys 20
out_has "bench over $mode" "bench reports $mode"
out_has '^kv_client: one-sided +[0-9.]+ +[0-9.]+ +[0-9]+$' "bench one-sided row"
out_has '^kv_client: two-sided +[0-9.]+ +[0-9.]+ +[0-9]+$' "bench two-sided row"

echo "== concurrent PUTs and one-sided GETs over $mode"
expect 0 "stress: no torn or wrong values" 'torn values 0, wrong values 0$' "${kv[@]}" stress --seconds 2
out_has "stress over $mode" "stress reports $mode"
retries=$(number 'retries ([0-9]+) ') found=$(number '\(([0-9]+) found')
if [ "${retries:-0}" -gt 0 ] && [ "${found:-0}" -gt 0 ]; then pass "reads raced writes: $retries retries, $found values found"
else fail "reads raced writes: retries ${retries:-none}, found ${found:-none}"; fi
# The control: the same run trusting every copy must catch torn values, or the check above
# proves nothing.
expect 1 "stress without the version check sees torn values" 'torn values [1-9]' \
    "${kv[@]}" stress --seconds 1 --skip-version-check
out_has 'FAILED: stress-[0-9]+: torn value' "the failure names the torn key"
if [ "$mode" = tcp ]; then
    # Clearing 100,000 keys takes seconds, which count as progress for --timeout; then the
    # 256-slot table fills, which the message must say how to avoid.
    expect 1 "stress with more keys than slots" \
        'a PUT found the table full: use fewer --keys or a server with more --slots' \
        "${kv[@]}" stress --seconds 1 --keys 100000 --timeout 1
fi

echo "== malformed requests over $mode"
expect 0 "truncated header refused" 'refused the request as malformed: request of 3 bytes, shorter' \
    "${kv[@]}" bad-request short
out_has 'closed the connection' "server disconnects after the truncated header"
log_has 'malformed request: request of 3 bytes.*closing the connection$' "server logs the malformed request"
if [ "$mode" = tcp ]; then
    expect 0 "length mismatch refused" 'malformed: request of 13 bytes, but its header says 11' \
        "${kv[@]}" bad-request length
    expect 0 "oversized request refused" 'malformed: request larger than the largest valid one' \
        "${kv[@]}" bad-request oversize
    expect 0 "bad version refused" 'malformed: protocol version 9, expected 1' "${kv[@]}" bad-request version
    expect 0 "unknown operation refused" 'malformed: unknown operation 7' "${kv[@]}" bad-request op
    expect 0 "long key refused" 'malformed: key length 65 outside 1..64' "${kv[@]}" bad-request key-length
    expect 0 "long value refused" 'malformed: value length 1025 over the limit' \
        "${kv[@]}" bad-request value-length
    # A client that does not speak the protocol at all: the log says what went wrong, not the
    # "Broken pipe" of the hello it could not be sent.
    # Enough of it for a frame header (a shorter start waits for the rest), written by a
    # subshell that a write into the refused connection cannot kill with SIGPIPE.
    (
        trap '' PIPE
        exec 3<>"/dev/tcp/$addr/$port" && printf 'GET / HTTP/1.0\r\nHost: kv\r\n\r\n%.0s' 1 2 3 4 >&3
        sleep 0.5
    ) 2>/dev/null
    garbage='closed: no hello sent: error: malformed or inconsistent frame from peer$'
    for _ in $(seq 100); do grep -Eq -- "$garbage" "$work/server.log" && break; sleep 0.1; done
    log_has "$garbage" "server logs a client that sent garbage as malformed"
    expect 0 "server still serves others" "stored 'after'" "${kv[@]}" put after ok
fi

echo "== server stopped over $mode"
before=$(grep -c ' connected over ' "$work/server.log")
"${kv[@]}" stress --seconds 60 >"$work/client.log" 2>&1 &
client_pid=$!
pids+=("$client_pid")
for _ in $(seq 300); do
    [ "$(grep -c ' connected over ' "$work/server.log")" -ge $((before + 4)) ] && break
    sleep 0.1
done
sleep 0.5
kill -TERM "$server_pid"
finish "$server_pid"
cp "$work/server.log" "$work/out"
if [ "$rc" = 0 ]; then pass "SIGTERM stops the server during a stress run"; else fail "server exit $rc"; fi
out_has 'stopping \(SIGTERM\), closing 4 connection' "server says why it stops"
out_has 'served [0-9]+ connection\(s\)$' "server says how many connections it served"
finish "$client_pid"
cp "$work/client.log" "$work/out"
if [ "$rc" = 1 ] && grep -q '^kv_client: lost the server: ' "$work/out"; then pass "client reports the lost server"
else fail "client reports the lost server: exit $rc"; fi
expect 1 "get from a stopped server" 'cannot connect to .*refused' "${kv[@]}" get greeting
if [ "$mode" = tcp ]; then
    # A client that connects and says nothing: its session waits for the hello exchange, and
    # the server stops all the same, saying why that connection ended.
    start_server
    (exec 3<>"/dev/tcp/$addr/$port" && sleep 10) 2>/dev/null &
    pids+=("$!")
    for _ in $(seq 100); do grep -q ' connected over tcp$' "$work/server.log" && break; sleep 0.1; done
    kill -TERM "$server_pid"
    finish "$server_pid"
    log_has 'closed: no hello sent: server stopping$' "a silent client's session ends when the server stops"
fi
if [ "$mode" = tcp ]; then  # the client's own watchdog, the same on both transports
    start_server
    kill -STOP "$server_pid"
    expect 1 "client gives up on a frozen server" 'no answer from .* for 2 s' "${kv[@]}" --timeout 2 get greeting
fi

summary
