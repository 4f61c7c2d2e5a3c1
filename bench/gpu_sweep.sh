#!/usr/bin/env bash
# A task profile's sweep on a GPU machine for a fixed time, its finished runs returned as one bundle: the steps by which
# bench/results/runs/'s H200 runs were made (there by hand, before this script), so that a later session with such a
# machine goes on in one call.
#
#   bash bench/gpu_sweep.sh TASK PROFILE [DEADLINE_S] [TRIALS]      (from the repository root, OUT set to a folder)
#
# The committed bundle of the experiment (bench/results/runs/<task>-<profile>.tar.xz), if any, goes into a fresh
# store first and its configurations are skipped (--skip-finished); TRIALS trials (default 16) then share the GPU
# under CUDA MPS, one client worker each with 1/TRIALS of the GPU, until every trial ended or DEADLINE_S (default
# 450) passed, when the sweep is stopped as Ctrl-C stops it (a trial cut short is not kept). Whatever finished,
# bundled with what came in, is written to $OUT/<task>-<profile>.tar.xz beside the sweep's log and nvidia-smi's
# samples: `fedbench unbundle` it at home. On a machine without fedbench installed, a `.gpu/site.tar.xz` of its
# missing packages is unpacked onto PYTHONPATH, and `.gpu/data` is the data folder unless FEDBENCH_DATA says another.
set -u
task=$1 profile=$2 deadline=${3:-450} trials=${4:-16}
out=${OUT:?set OUT to the folder the bundle, log and samples go to}
repo=$PWD
experiment=$(basename "$task" .yaml)-$profile
if ! python3 -c "import ray, mlflow, optuna" 2>/dev/null && [ -f .gpu/site.tar.xz ]; then
  mkdir -p /tmp/fedbench-site && tar -xJf .gpu/site.tar.xz -C /tmp/fedbench-site
  export PYTHONPATH=$repo:/tmp/fedbench-site
fi
export FEDBENCH_DATA=${FEDBENCH_DATA:-$repo/.gpu/data} FEDBENCH_RESULTS=${FEDBENCH_RESULTS:-$(mktemp -d)}
export PYTHONUNBUFFERED=1
gpus=0 sampler="" mps=""
if command -v nvidia-smi >/dev/null; then
  gpus=$(python3 -c "print(1 / $trials)")
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps CUDA_MPS_LOG_DIRECTORY=/tmp/nvidia-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  pgrep -x nvidia-cuda-mps-control >/dev/null || { nvidia-cuda-mps-control -d && mps=started; }
  nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv -lms 2000 > "$out/nvidia-smi.csv" 2>&1 &
  sampler=$!
fi
fedbench=(python3 -m fedbench)
committed=bench/results/runs/$experiment.tar.xz
{
  date -u; git -C "$repo" rev-parse HEAD 2>/dev/null; nproc
  if [ -f "$committed" ]; then "${fedbench[@]}" unbundle "$committed" || exit 1; fi
  timeout -s INT -k 60 "$deadline" "${fedbench[@]}" sweep "$task" --profile "$profile" --skip-finished \
    --set resources.client_cpus=0.5 --set resources.client_gpus="$gpus" --max-concurrent "$trials"
  echo "sweep ended: exit $?"
  "${fedbench[@]}" bundle "$task" --profile "$profile" --out "$out/$experiment.tar.xz"
} > "$out/sweep.log" 2>&1
status=$?
[ -n "$sampler" ] && kill "$sampler"
[ -n "$mps" ] && echo quit | nvidia-cuda-mps-control
tail -n 3 "$out/sweep.log"
exit $status
