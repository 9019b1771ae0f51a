#!/bin/bash
# Two Soft-RoCE VMs joined by one link that drops and delays packets (netem on both ends):
# echo traffic over RDMA and over the TCP fallback must come back intact, and the link must
# really have lost packets. Each VM is a separate qemu (scripts/rxe-vm/run with
# COVERBS_VM_LINK): rdma_rxe in Debian 12's kernel cannot run in a second network namespace.
# Usage: lossy_link_test.sh ECHO_SERVER ECHO_CLIENT
# Environment: COVERBS_LOSS (netem arguments, default "loss 1% delay 1ms"), COVERBS_LOSSY_MESSAGES
# (round trips per connection, default 100), COVERBS_LOSSY_SIZE (bytes per message, default 16384).
set -uo pipefail
[ $# = 2 ] || { sed -n '6,8s/^# //p' "$0" >&2; exit 2; }
server=$(realpath "$1") client=$(realpath "$2")
here=$(cd "$(dirname "$0")" && pwd)
run_vm=$here/../../scripts/rxe-vm/run
netem=${COVERBS_LOSS:-loss 1% delay 1ms}
messages=${COVERBS_LOSSY_MESSAGES:-100}
size=${COVERBS_LOSSY_SIZE:-16384}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait; rm -rf "$work"' EXIT

# Two UDP ports on 127.0.0.1 carry the link's frames, one per end.
port_a=$((40000 + RANDOM % 20000)) port_b=$((port_a + 1))
server_ip=10.20.0.1 client_ip=10.20.0.2 echo_port=7000

cat >"$work/server-job" <<JOB
tc qdisc add dev eth0 root netem $netem || exit 90
# Two clients of two connections each: one over RDMA, one over TCP.
timeout 400 "$server" --listen $server_ip --port $echo_port --connections 4
rc=\$?
tc -s qdisc show dev eth0
exit \$rc
JOB
cat >"$work/client-job" <<JOB
tc qdisc add dev eth0 root netem $netem || exit 90
rc=0
for t in rdma tcp; do
    # The other VM may still be booting: retry while the server is not there yet.
    for i in \$(seq 60); do
        timeout 200 "$client" --connect $server_ip:$echo_port --transport \$t --connections 2 \
            --messages $messages --size $size --timeout 60 >out 2>&1 && break
        grep -qE 'refused|unreachable|timed out' out || break
        sleep 2
    done
    cat out
    grep -q 'every reply matched' out || rc=1
done
tc -s qdisc show dev eth0
exit \$rc
JOB

# The guest mounts a fresh /tmp: a build under /tmp (a CI clone) must be shared explicitly.
programs_dirs="$(dirname "$server"):$(dirname "$client")"
vm() {  # vm NAME IP LOCAL_PORT REMOTE_PORT: runs NAME-job in a VM, output in NAME.log
    (cd "$work" && COVERBS_VM_RW="$programs_dirs" COVERBS_VM_MEM=768 COVERBS_VM_TIMEOUT=480 COVERBS_VM_LINK="$3:$4" \
        COVERBS_VM_KARGS="coverbs.netdev=eth0 coverbs.ip=$2/24" \
        "$run_vm" bash "$work/$1-job" >"$work/$1.log" 2>&1)
}
start=$SECONDS
vm server $server_ip $port_a $port_b &
server_pid=$!
vm client $client_ip $port_b $port_a
client_rc=$?
wait $server_pid
server_rc=$?

failed=0
check() { if eval "$2"; then echo "PASS $1"; else echo "FAIL $1"; failed=1; fi; }
dropped() { sed -n 's/.*(dropped \([0-9]*\),.*/\1/p' "$work/$1.log" | tail -n 1; }
check "client VM exit 0 (got $client_rc)" '[ $client_rc = 0 ]'
check "server VM exit 0 (got $server_rc)" '[ $server_rc = 0 ]'
check "RDMA echo intact over the lossy link" "grep -q 'over rdma, $messages round trips' '$work/client.log'"
check "TCP echo intact over the lossy link" "grep -q 'over tcp, $messages round trips' '$work/client.log'"
check "every reply matched, twice" "[ \$(grep -c 'every reply matched' '$work/client.log') = 2 ]"
check "the client's end dropped packets ($(dropped client))" '[ "$(dropped client)" -gt 0 ]'
check "the server's end dropped packets ($(dropped server))" '[ "$(dropped server)" -gt 0 ]'
grep -E 'connection\(s\) to|round trips in' "$work/client.log" | sed 's/^/    /'
echo "netem: $netem; $((SECONDS - start)) s"
if [ $failed != 0 ]; then
    for f in client server; do echo "--- $f VM"; sed 's/^/    | /' "$work/$f.log"; done
fi
exit $failed
