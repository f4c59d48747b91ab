#!/usr/bin/env bash
# What the synchronous steps' blocks cost (docs/runtime.md, "The same run whatever the layout"):
# dlrm-small on ROWS synthetic rows at batch 2048, trained by one process with blocks of 32, 64 and
# 128 samples against one block per step (the step's sums in one GEMM each: no tree), and by the
# default distributed job (planned on this host) with blocks of 64 against one block per replica.
# Each configuration runs twice, in alternation; the table gives the better of each and its ratio
# to the one-block run of the same kind. Usage: benchmarks/blocks_bench.sh [ROWS] (default 400000).
set -euo pipefail
rows=${1:-400000}
bin=${HETERPS:-build/tools/heterps}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rate() { sed -n 's/^  samples\/s *\([0-9,]*\).*/\1/p' | tr -d , | head -1; }
declare -A best
for round in 1 2; do
  for b in 32 64 128 2048; do
    r=$("$bin" train --single-process --rows "$rows" --batch 2048 --block-size "$b" | rate)
    (( r > ${best[single-$b]:-0} )) && best[single-$b]=$r
  done
  for b in 64 1024; do
    rm -rf "$work/job"
    r=$("$bin" train --rows "$rows" --batch 2048 --block-size "$b" --job-dir "$work/job" | rate)
    (( r > ${best[job-$b]:-0} )) && best[job-$b]=$r
  done
done
cpu=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)
echo "On $cpu ($(nproc) hardware threads): dlrm-small, $rows synthetic rows, batch 2048."
echo
echo "| run | block size | samples/s | against one block |"
echo "|---|---:|---:|---:|"
for b in 32 64 128 2048; do
  printf '| single process, 1 thread | %s | %s | %.2f |\n' "$b" "${best[single-$b]}" \
    "$(awk "BEGIN { print ${best[single-$b]} / ${best[single-2048]} }")"
done
for b in 64 1024; do
  printf '| distributed, planned on this host | %s | %s | %.2f |\n' "$b" "${best[job-$b]}" \
    "$(awk "BEGIN { print ${best[job-$b]} / ${best[job-1024]} }")"
done
