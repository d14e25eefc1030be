#!/usr/bin/env bash
# Regenerates the sample traces in this directory (small on purpose: ResNet-50 at micro-batch 8
# on 4 A100s, 256 KiB gradient pieces). Run from anywhere after the README set-up.
set -euo pipefail
cd "$(dirname "$0")"
for algo in ring inswitch; do
    innet trace gen --model resnet50 --batch 8 --gpu a100 --gpus 4 --algo "$algo" \
        --bucket-mb 25 --chunk-kb 256 -o "resnet50_a100x4_${algo}.itr"
done
innet trace gen --model resnet50 --batch 8 --gpu a100 --gpus 4 --algo inswitch \
    --bucket-mb 25 --chunk-kb 4096 -o resnet50_a100x4_inswitch_small.txt
