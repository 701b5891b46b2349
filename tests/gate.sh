#!/usr/bin/env bash
# Run one gate and print its duration: tests/gate.sh NAME COMMAND...
name=$1; shift
start=$(date +%s)
printf '\n=== gate %s: start\n' "$name"
"$@"; rc=$?
dur=$(( $(date +%s) - start ))
printf '=== gate %s: %s in %ds\n' "$name" "$([ $rc = 0 ] && echo passed || echo FAILED)" "$dur"
mkdir -p .cache && printf '%s\t%s\t%ds\n' "$name" "$([ $rc = 0 ] && echo passed || echo FAILED)" "$dur" >> .cache/gates.tsv
exit $rc
