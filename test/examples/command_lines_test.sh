#!/bin/bash
# Every program answers --help with its usage (exit 0), and a bad command line with two lines,
# one naming the program and the problem, then a pointer to --help (exit 2), before it touches
# a device or the network. The benchmarks that listen name the address they could not use.
# Usage: command_lines_test.sh PROGRAM...
[ $# -gt 0 ] || { sed -n '2,5s/^# //p' "$0" >&2; exit 2; }
failed=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for program in "$@"; do
    name=$(basename "$program")
    timeout 5 "$program" --help >"$out" 2>&1
    rc=$?
    if [ $rc = 0 ] && head -1 "$out" | grep -q "^usage: $name "; then pass "$name --help"
    else fail "$name --help: exit $rc, first line '$(head -1 "$out")'"; fi
    for bad in --no-such-option "--help-me"; do
        timeout 5 "$program" "$bad" >"$out" 2>&1
        rc=$?
        if [ $rc = 2 ] && [ "$(wc -l <"$out")" = 2 ] && grep -q "^$name: unknown option '$bad'" "$out" &&
            grep -qx "Try '$name --help' for the options." "$out"; then pass "$name $bad"
        else fail "$name $bad: exit $rc, output '$(tr '\n' '|' <"$out")'"; fi
    done
    case $name in pingpong_bench | stream_bench)
        # 192.0.2.1 (TEST-NET-1) is no address of this machine.
        timeout 20 "$program" --address 192.0.2.1 --quick >"$out" 2>&1
        rc=$?
        if [ $rc = 1 ] && grep -q "^$name: cannot listen on 192.0.2.1 (tcp): " "$out"; then
            pass "$name names the address it cannot listen on"
        else fail "$name --address 192.0.2.1: exit $rc, output '$(tr '\n' '|' <"$out")'"; fi
    esac
done
exit $failed
