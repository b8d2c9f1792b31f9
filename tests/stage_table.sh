#!/usr/bin/env bash
# The table of make test's stages: stage, seconds, exit status and lane (from the TSV tests/stages.sh writes; stages
# of two lanes ran at the same time), and the prebuild's lines (what the background builds took).
set -u
tsv=$1
started=${2:-}
build_dir=$(dirname "$tsv")
printf '\n==> make test: stages\n'
printf '%-24s %8s %6s  %s\n' stage seconds status lane
while IFS=$'\t' read -r stage seconds status lane; do
    printf '%-24s %8s %6s  %s\n' "$stage" "$seconds" "$status" "${lane:-}"
done < "$tsv"
if [ -n "$started" ]; then
    printf '%-24s %8s\n' total "$(( $(date +%s) - started ))"
fi
if [ -s "$build_dir/prebuild.log" ]; then
    printf '\n==> background builds (tests/cluster/prebuild.py)\n'
    grep '^\[prebuild\]' "$build_dir/prebuild.log" || true
fi
