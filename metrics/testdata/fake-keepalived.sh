#!/bin/bash
# A stand-in for keepalived's JSON dump, for tests that run without root or keepalived.
# Usage: fake-keepalived.sh SIGNAL FIXTURE DUMP COUNT
# On SIGNAL it appends a line to COUNT and copies FIXTURE over DUMP in place (truncate, then
# write), first writing half of it and pausing, so that readers meet a half-written dump.
# FIXTURE "ignore" counts the signal and writes nothing.
sig=$1 fixture=$2 dump=$3 count=$4
on_signal() {
	echo signal >>"$count"
	[ "$fixture" = ignore ] && return
	head -c "$(($(stat -c %s "$fixture") / 2))" "$fixture" >"$dump"
	sleep 0.05
	cat "$fixture" >"$dump"
}
trap on_signal "$sig"
echo ready >"$count.ready"
while :; do
	sleep 5 &
	wait $!
done
