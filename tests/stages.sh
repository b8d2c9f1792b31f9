#!/usr/bin/env bash
# Runs make targets one after the other, stopping at the first failure, and appends each one's line
# "stage<TAB>seconds<TAB>status<TAB>lane" to a TSV that tests/stage_table.sh prints.
#   tests/stages.sh TSV LANE TARGET...
set -u
tsv=$1
lane=$2
shift 2
for stage in "$@"; do
    begun=$(date +%s)
    rc=0
    ${MAKE:-make} "$stage" || rc=$?
    printf '%s\t%s\t%s\t%s\n' "$stage" "$(( $(date +%s) - begun ))" "$rc" "$lane" >> "$tsv"
    [ "$rc" -eq 0 ] || exit "$rc"
done
