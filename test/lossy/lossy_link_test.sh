#!/bin/bash
# Two Soft-RoCE VMs joined by one link that drops and delays packets (netem on both ends):
# echo traffic over RDMA and over the TCP fallback must come back intact, and the link must
# really have lost packets. Both ends also lose every connection-manager DREQ they send: the
# end of stream a closing RDMA peer gives must not rest on that message, which the kernel
# stops resending once the closing side has destroyed its rdma_cm id. Each VM is a separate
# qemu (scripts/rxe-vm/run with COVERBS_VM_LINK): rdma_rxe in Debian 12's kernel cannot run in
# a second network namespace.
# Usage: lossy_link_test.sh ECHO_SERVER ECHO_CLIENT
# Environment: COVERBS_LOSS (netem arguments, default "loss 1% delay 1ms"), COVERBS_LOSSY_MESSAGES
# (round trips per connection, default 100), COVERBS_LOSSY_SIZE (bytes per message, default 16384).
set -uo pipefail
[ $# = 2 ] || { sed -n '9,11s/^# //p' "$0" >&2; exit 2; }
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

# RoCE v2's connection manager messages are MADs to QP 1 over UDP 4791. From the IP header:
# UDP destination port at 22, the MAD's management class at 49 (7: CM) and its attribute at
# 64 (0x15: DREQ), after UDP (8), BTH (12) and DETH (8) headers. They go to a band whose netem
# loses every packet: a lost packet must look sent, as on a real link (a filter's drop action
# reports the drop, and rxe then resends the packet at once, for ever). Both ends lose all
# their DREQs, so neither sees DISCONNECTED and each that closes sends one (counted).
dreq="u32 match u16 4791 0xffff at 22 match u8 0x07 0xff at 49 match u16 0x0015 0xffff at 64"
# A job's first lines: the netem arguments, the link's shaping, and how the job prints what one
# of its qdiscs dropped.
job_head() {
    printf 'netem=%q dreq=%q\n' "$netem" "$dreq"
    cat <<'HEAD'
shape_link() {
    tc qdisc add dev eth0 root handle 1: prio bands 2 priomap 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 &&
    tc qdisc add dev eth0 parent 1:1 handle 10: netem $netem &&
    tc qdisc add dev eth0 parent 1:2 handle 20: netem loss 100% &&
    tc filter add dev eth0 parent 1: protocol ip prio 1 $dreq flowid 1:2
}
drops() { tc -s qdisc show dev eth0 |
          awk -v q="qdisc netem $1" 'index($0, q) == 1 { on = 1; next }
                                     on && /dropped/ { sub(/.*[(]dropped /, ""); sub(/,.*/, ""); print; exit }'; }
HEAD
}
{ job_head; cat <<JOB; } >"$work/server-job"
shape_link || exit 90
# Two clients of two connections each: one over RDMA, one over TCP.
timeout -k 10 400 "$server" --listen $server_ip --port $echo_port --connections 4
rc=\$?
echo "link drops: \$(drops 10:)"
echo "DREQs dropped: \$(drops 20:)"
exit \$rc
JOB
{ job_head; cat <<JOB; } >"$work/client-job"
shape_link || exit 90
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
echo "link drops: \$(drops 10:)"
echo "DREQs dropped: \$(drops 20:)"
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
dropped() { sed -n "s/^$2: \([0-9]*\)\$/\1/p" "$work/$1.log" | tail -n 1; }
check "client VM exit 0 (got $client_rc)" '[ $client_rc = 0 ]'
check "server VM exit 0 (got $server_rc)" '[ $server_rc = 0 ]'
check "RDMA echo intact over the lossy link" "grep -q 'over rdma, $messages round trips' '$work/client.log'"
check "TCP echo intact over the lossy link" "grep -q 'over tcp, $messages round trips' '$work/client.log'"
check "every reply matched, twice" "[ \$(grep -c 'every reply matched' '$work/client.log') = 2 ]"
for end in client server; do
    n=$(dropped $end "link drops")
    check "the $end's end dropped packets (${n:-none counted})" "[ '${n:-0}' -gt 0 ]"
    n=$(dropped $end "DREQs dropped")
    check "the $end's end lost its DREQs (${n:-none counted})" "[ '${n:-0}' -gt 0 ]"
done
grep -E 'connection\(s\) to|round trips in' "$work/client.log" | sed 's/^/    /'
echo "netem: $netem; $((SECONDS - start)) s"
if [ $failed != 0 ]; then
    for f in client server; do echo "--- $f VM"; sed 's/^/    | /' "$work/$f.log"; done
fi
exit $failed
