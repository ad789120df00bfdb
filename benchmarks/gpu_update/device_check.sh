#!/usr/bin/env bash
# The CUDA checks of the learner, as one script for a lent GPU machine (run from the repo root).
# That machine has torch but not gymnasium, lz4 or ale-py: their wheels for its Python go in
# .whl/ (pip download --no-deps --only-binary=:all: --python-version 3.12 ...), installed
# here into /tmp/site. Writes its logs under $OUT (default /tmp/gpu_check).
set -uo pipefail
export PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
nvidia-smi -L
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))"
echo "== unit tests on CUDA (the CUDA graph update's parity and fallbacks)"
timeout 240 python3 -m pytest -q -p no:cacheprovider -n 8 tests/unit/test_accel.py tests/unit/test_accel_parity.py \
  tests/unit/test_policy_loss_addons.py 2>&1 | tee "$OUT/pytest.log" | tail -25
echo "== update time, eager vs CUDA graphs"
timeout 180 python3 benchmarks/gpu_update/run.py --json "$OUT/gpu_update.json" 2>&1 | tee "$OUT/bench.log"
echo "== whole runs on cuda from the command line"
for spec in "ppo_cartpole.yaml learner.target_steps=50000" \
            "sac_pendulum.yaml learner.target_steps=6000" \
            "dqn_cartpole.yaml learner.target_steps=20000" \
            "ppo_atari.yaml learner.target_steps=16384 env.id=BreakoutNoFrameskip-v4"; do
  set -- $spec
  echo "-- $spec"
  ( time timeout 150 python3 -m pytorchrl.cli train examples/configs/$1 "${@:2}" scheme.local_device=cuda \
      --run-dir "/tmp/run-$1" ) 2>&1 | tee -a "$OUT/cli.log" | grep -v "^ *$" | tail -6
  cat "/tmp/run-$1/summary.yaml"
done
echo "== the same off-policy runs with the graphs off (PYTORCHRL_CUDA_GRAPHS=0), for comparison"
for spec in "sac_pendulum.yaml learner.target_steps=6000" "dqn_cartpole.yaml learner.target_steps=20000"; do
  set -- $spec
  echo "-- $spec (eager)"
  PYTORCHRL_CUDA_GRAPHS=0 timeout 150 python3 -m pytorchrl.cli train examples/configs/$1 "${@:2}" \
      scheme.local_device=cuda --run-dir "/tmp/run-eager-$1" 2>&1 | tee -a "$OUT/cli.log" | grep "^done\|^evaluation"
done
