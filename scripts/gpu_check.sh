#!/usr/bin/env bash
# The prepared device check (issue 14): on one CUDA GPU, in at most ~8 minutes, run
#   1. the cuda test tier (pytest -m cuda),
#   2. the claims bench on CUDA (pin_memory per copy / staging / plain, twins, in-place, compile),
#   3. small CUDA sweeps through the real product (python -m sweeps.train -m ... device=cuda) and
#      their reports: compile modes with CUDA graphs, pin_memory x non_blocking, seeds_per_job (8 seeds
#      one process each or together, 64 together), the Atari preset,
# and write every table with the machine's fingerprint into one folder (default $OUT, else
# ./gpu_results), packed as gpu_results.tgz: docs/results/gpu/ is where they are committed.
#
# Usage:  bash scripts/gpu_check.sh                 (on the GPU machine, from the repository root)
#         GPU_CHECK_ALLOW_CPU=1 bash scripts/gpu_check.sh   (here: the same steps on CPU, tiny, to test the script)
# Python packages the GPU image lacks travel as wheels in .whl/ (scripts/gpu_wheels.sh makes them);
# rlsweep itself runs from src/ (PYTHONPATH), so the image's own torch is used, not our CPU pin.
set -u
cd "$(dirname "$0")/.."
DEST="${OUT:-$PWD/gpu_results}/gpu_results"
mkdir -p "$DEST"
export DEST
LOG="$DEST/gpu_check.log"
START=$(date +%s)
export PYTHONUNBUFFERED=1 WANDB_MODE=disabled HYDRA_FULL_ERROR=1 PYTHON="${PYTHON:-python3}"

if ls .whl/*.whl >/dev/null 2>&1; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >>"$LOG" 2>&1 || echo "wheel install failed (see log)" | tee -a "$LOG"
  export PYTHONPATH="/tmp/site:$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi

DEVICE=cuda
if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>>"$LOG"; then
  if [ "${GPU_CHECK_ALLOW_CPU:-0}" = 1 ]; then
    DEVICE=cpu
    echo "no CUDA device: running the script's steps on CPU (GPU_CHECK_ALLOW_CPU=1), tiny budgets" | tee -a "$LOG"
  else
    echo "no CUDA device: nothing to check (set GPU_CHECK_ALLOW_CPU=1 to test this script on a CPU)" | tee -a "$LOG"
    exit 2
  fi
fi

STEPS="$DEST/steps.tsv"
printf 'step\tstatus\tseconds\n' >"$STEPS"
step() {  # step NAME TIMEOUT_S COMMAND...: run one step with a deadline, keep its output, never stop the script
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  echo "== $name ($*)" | tee -a "$LOG"
  timeout --kill-after=10 "$limit" "$@" >>"$LOG" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" | tee -a "$STEPS"
}

step fingerprint 60 "$PYTHON" - <<'PY'
import json, os, platform, subprocess, torch
fp = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
      "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
      "cpu_count": os.cpu_count()}
try:
    fp["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                                       "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout.strip()
except (OSError, subprocess.SubprocessError):
    fp["nvidia_smi"] = None
from rlsweep.results import fingerprint, provenance
fp["rlsweep_fingerprint"] = fingerprint(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
fp["provenance"] = provenance()
print(json.dumps(fp, indent=1))
open(os.path.join(os.environ["DEST"], "fingerprint.json"), "w").write(json.dumps(fp, indent=1))
PY

# On the GPU the sweeps are prepared as a user's are (one untimed cold compile per compiled cell, so the
# timed jobs compare like with like); the CPU rehearsal skips that stage to stay tiny.
if [ "$DEVICE" = cuda ]; then BUDGET=20000; SAC_BUDGET=4000; ATARI=20000; PREP=true; MANY=64
else BUDGET=2048; SAC_BUDGET=600; ATARI=1024; PREP=false; MANY=4; fi

step cuda_tests 200 "$PYTHON" -m pytest -m cuda -q -p no:cacheprovider --junitxml="$DEST/cuda_tests.xml" tests
step claims 120 "$PYTHON" -m sweeps.bench --claims --quick --out "$DEST/claims.json"

sweep() {  # sweep NAME TIMEOUT_S OVERRIDES...: a real multirun on $DEVICE and its report
  local name=$1 limit=$2; shift 2
  local dir="$DEST/sweeps/$name"
  step "sweep_$name" "$limit" "$PYTHON" -m sweeps.train -m "device=$DEVICE" "prepare=$PREP" progress=false logger.mode=disabled \
    "hydra.sweep.dir=$dir" "$@"
  step "report_$name" 60 "$PYTHON" -m sweeps.report "$dir"
}
sweep ppo_compile 240 experiment=smoke "total_env_steps=$BUDGET" compile=none,default,reduce-overhead seed=0,1
sweep sac_copies 120 algo=sac env=pendulum "total_env_steps=$SAC_BUDGET" algo.learning_starts=200 \
  pin_memory=false,true,staging non_blocking=false,true
# seeds_per_job (docs/guide/seeds.md): 8 seeds one process each against 8 in one process, then $MANY in one
# process; each record's throughput is its process's, every seed's steps counted
sweep ppo_seeds 300 experiment=smoke "total_env_steps=$BUDGET" "seed=range(0,8)" seeds_per_job=1,8
sweep ppo_seeds_many 180 experiment=smoke "total_env_steps=$BUDGET" "seed=range(0,$MANY)" "seeds_per_job=$MANY"
if [ -f conf/experiment/atari_ppo.yaml ]; then
  sweep atari_ppo 240 experiment=atari_ppo "total_env_steps=$ATARI" compile=none,default backend.channels_last=false,true
fi

# keep the tables (summary.md, report.json) and the records, drop checkpoints/plots: one archive comes back
find "$DEST/sweeps" -name '*.pt' -delete 2>/dev/null
echo "total $(( $(date +%s) - START )) s on $DEVICE" | tee -a "$LOG"
tar -C "$(dirname "$DEST")" -czf "$(dirname "$DEST")/gpu_results.tgz" gpu_results
cat "$STEPS"
