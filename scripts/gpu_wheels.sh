#!/usr/bin/env bash
# Fetch, here, the wheels of what scripts/gpu_check.sh needs and the GPU machine's image lacks
# (its python3 is 3.12 with its own CUDA torch; see the device README): into .whl/, which the
# device run carries. --no-deps: the image already has numpy, torch, pyyaml, cloudpickle, pytest, ...
set -eu
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl \
  "gymnasium>=1.0,<2" farama-notifications "hydra-core==1.3.8" "omegaconf>=2.3,<2.4" \
  "submitit>=1.5" hydra-submitit-launcher==1.2.0 ale-py
# omegaconf needs antlr4 4.9.x, published as a source archive only: build its (pure Python) wheel here
python3 -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3
du -sh .whl && ls .whl
