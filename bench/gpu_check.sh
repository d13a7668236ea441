#!/usr/bin/env bash
# What CPUs cannot confirm, on one CUDA GPU in at most 10 minutes: one line per check
# (bench/gpu_check.py's docstring says what each measures and when it passes).
#   bench/gpu_check.sh                      # the tiny model in bf16 on CUDA
#   DDAI_GPU_MODEL=/models/Qwen2.5-1.5B-Instruct bench/gpu_check.sh   # a real model for `clip`
# Needs the project installed with a CUDA build of torch (make setup TORCH_SPEC=...).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}" HF_HUB_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1
exec timeout 600 "$PY" bench/gpu_check.py "$@" 2> >(grep -v -e "Warning" -e "warnings.warn" >&2)
