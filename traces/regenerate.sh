#!/usr/bin/env bash
# Regenerates the sample traces in this directory (small on purpose: ResNet-50 at micro-batch 8
# on 4 A100s, 256 KiB gradient pieces), in the current format version. Run from anywhere after
# the README set-up; INNET overrides the command (e.g. INNET="python -m sim.cli").
#
# resnet50_a100x4_ring_v1.itr is not regenerated: it is the ring sample as format version 1
# wrote it (no checksums), kept so that reading version 1 stays tested.
set -euo pipefail
cd "$(dirname "$0")"
read -r -a innet <<< "${INNET:-innet}"
for algo in ring inswitch; do
    "${innet[@]}" trace gen --model resnet50 --batch 8 --gpu a100 --gpus 4 --algo "$algo" \
        --bucket-mb 25 --chunk-kb 256 -o "resnet50_a100x4_${algo}.itr"
done
"${innet[@]}" trace gen --model resnet50 --batch 8 --gpu a100 --gpus 4 --algo inswitch \
    --bucket-mb 25 --chunk-kb 4096 -o resnet50_a100x4_inswitch_small.txt
