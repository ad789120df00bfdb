#!/usr/bin/env bash
# Build the virtual env of the peer frameworks the benchmarks compare us with:
#   benchmarks/.venv-peers  (gitignored)
# with torch 2.13.0 (CPU build), stable-baselines3 2.9.2, gymnasium, psutil, ray[rllib] 2.60.0, and
# the simulators of the Atari and MuJoCo comparisons: ale-py (the games' ROMs come with it),
# opencv-python-headless (SB3's AtariWrapper resizes with OpenCV) and mujoco.
#
# torch is installed FIRST and pinned afterwards: a bare "torch" requirement pulled in by
# stable-baselines3 would otherwise fetch the multi-GB CUDA build from PyPI.
#
# Idempotent: a venv that already imports every peer at the right version is left as it is
# (pass --force to rebuild it). Environment:
#   PEERS_PYTHON   interpreter the venv is made from (default: python3.11, else python3)
#   PEERS_VENV     where the venv goes (default: benchmarks/.venv-peers)
#   SKIP_RLLIB=1   do not install ray[rllib] (SB3 benchmark only)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${PEERS_VENV:-$HERE/.venv-peers}"
TORCH_VERSION="2.13.0"
SB3_VERSION="2.9.2"
# rl-baselines3-zoo itself (its hyperparameters and training script) and Box2D, for the zoo
# table's runs of the zoo on this machine (benchmarks/zoo/run.py --system rl-zoo3).
RLZOO_VERSION="2.9.2"
RAY_VERSION="2.60.0"
# The same emulator and physics as our side (pytorchrl's "atari" and "mujoco" extras here).
ALE_VERSION="0.12.1"
MUJOCO_VERSION="4.0.0"
FORCE=0
[[ "${1:-}" == "--force" ]] && FORCE=1

PY="$VENV/bin/python"

check() {
    # Exit 0 when the venv has every peer at the pinned version (and a CPU torch).
    [[ -x "$PY" ]] || return 1
    "$PY" - "$TORCH_VERSION" "$SB3_VERSION" "$RAY_VERSION" "${SKIP_RLLIB:-0}" "$ALE_VERSION" "$MUJOCO_VERSION" \
        <<'EOF' 2>/dev/null
import sys
torch_v, sb3_v, ray_v, skip_rllib, ale_v, mujoco_v = sys.argv[1:]
import torch, stable_baselines3, gymnasium, psutil
assert torch.__version__.split("+")[0] == torch_v, torch.__version__
assert torch.version.cuda is None, "CUDA build of torch"
assert stable_baselines3.__version__ == sb3_v, stable_baselines3.__version__
import ale_py, cv2, mujoco  # noqa: F401  (atari_ppo/run.py, offpolicy/run.py --tasks sac-mujoco)
assert ale_py.__version__ == ale_v, ale_py.__version__
assert mujoco.__version__ == mujoco_v, mujoco.__version__
gymnasium.make("HalfCheetah-v5").close()   # gymnasium's MuJoCo tasks load with this mujoco
import rl_zoo3, Box2D, pygame  # noqa: F401  (benchmarks/zoo/run.py --system rl-zoo3)
if skip_rllib != "1":
    import ray
    assert ray.__version__ == ray_v, ray.__version__
    import ray.rllib  # noqa: F401  (the extras: rllib needs e.g. dm_tree, scipy, pyarrow)
EOF
}

if [[ $FORCE == 0 ]] && check; then
    echo "setup_peers: $VENV is already set up:"
    "$PY" -c "import torch, stable_baselines3, gymnasium; print('  torch', torch.__version__, '| sb3', stable_baselines3.__version__, '| gymnasium', gymnasium.__version__)"
    "$PY" -c "import ale_py, cv2, mujoco; print('  ale-py', ale_py.__version__, '| opencv', cv2.__version__, '| mujoco', mujoco.__version__)"
    [[ "${SKIP_RLLIB:-0}" == "1" ]] || "$PY" -c "import ray; print('  ray', ray.__version__)"
    exit 0
fi

if [[ $FORCE == 1 ]]; then
    rm -rf "$VENV"
fi

BASE_PY="${PEERS_PYTHON:-}"
if [[ -z "$BASE_PY" ]]; then
    BASE_PY="$(command -v python3.11 || command -v python3)"
fi
echo "setup_peers: creating $VENV with $BASE_PY ($("$BASE_PY" --version 2>&1))"
[[ -x "$PY" ]] || "$BASE_PY" -m venv "$VENV"
PIP=("$PY" -m pip install --disable-pip-version-check)
"${PIP[@]}" --upgrade pip wheel setuptools >/dev/null

# 1. torch, CPU build. A local CPU wheel (find-links, e.g. /opt/wheels) is preferred; the
#    "+cpu" local version sorts above the plain PyPI (CUDA) release of the same version.
echo "setup_peers: installing torch==$TORCH_VERSION (CPU)"
"${PIP[@]}" "torch==$TORCH_VERSION"
if ! "$PY" -c "import torch, sys; sys.exit(torch.version.cuda is not None)"; then
    echo "setup_peers: WARNING: the torch that was installed is a CUDA build" >&2
fi
INSTALLED_TORCH="$("$PY" -c 'import torch; print(torch.__version__)')"
# Pin the exact torch just installed, so that nothing below replaces it.
CONSTRAINTS="$(mktemp)"
trap 'rm -f "$CONSTRAINTS"' EXIT
echo "torch==$INSTALLED_TORCH" > "$CONSTRAINTS"

# 2. Stable-Baselines3 and the measuring tools.
echo "setup_peers: installing stable-baselines3==$SB3_VERSION, gymnasium, psutil"
"${PIP[@]}" -c "$CONSTRAINTS" "stable-baselines3==$SB3_VERSION" gymnasium psutil

# 3. The simulators: Atari (ale-py, OpenCV for SB3's AtariWrapper) and MuJoCo (gymnasium's
#    MuJoCo tasks import imageio too: its "mujoco" extra).
echo "setup_peers: installing ale-py==$ALE_VERSION, opencv-python-headless, mujoco==$MUJOCO_VERSION, imageio"
"${PIP[@]}" -c "$CONSTRAINTS" "ale-py==$ALE_VERSION" opencv-python-headless "mujoco==$MUJOCO_VERSION" imageio

# 3b. rl-baselines3-zoo and Box2D (benchmarks/zoo/run.py --system rl-zoo3).
echo "setup_peers: installing rl_zoo3==$RLZOO_VERSION, box2d"
"${PIP[@]}" -c "$CONSTRAINTS" "rl_zoo3==$RLZOO_VERSION" "box2d>=2.3.10" pygame   # gymnasium.envs.box2d imports pygame

# 4. RLlib (for the RLlib comparisons).
if [[ "${SKIP_RLLIB:-0}" != "1" ]]; then
    echo "setup_peers: installing ray[rllib]==$RAY_VERSION"
    if ! "${PIP[@]}" -c "$CONSTRAINTS" "ray[rllib]==$RAY_VERSION"; then
        echo "setup_peers: ERROR: ray[rllib]==$RAY_VERSION failed to install (see pip's message above);" \
             "run with SKIP_RLLIB=1 to set up the SB3 comparison only" >&2
        exit 1
    fi
fi

if check; then
    echo "setup_peers: done:"
    "$PY" -c "import torch, stable_baselines3, gymnasium; print('  torch', torch.__version__, '| sb3', stable_baselines3.__version__, '| gymnasium', gymnasium.__version__)"
    "$PY" -c "import ale_py, cv2, mujoco; print('  ale-py', ale_py.__version__, '| opencv', cv2.__version__, '| mujoco', mujoco.__version__)"
    [[ "${SKIP_RLLIB:-0}" == "1" ]] || "$PY" -c "import ray, ray.rllib; print('  ray', ray.__version__, '(rllib imports)')"
else
    echo "setup_peers: ERROR: the venv was built but a peer does not import at the pinned version:" >&2
    "$PY" - "$ALE_VERSION" "$MUJOCO_VERSION" "${SKIP_RLLIB:-0}" <<'EOF' >&2 || true
import sys
ale_v, mujoco_v, skip_rllib = sys.argv[1:]
import torch, stable_baselines3, gymnasium, psutil, ale_py, cv2, mujoco
print("versions: torch", torch.__version__, "| sb3", stable_baselines3.__version__, "| ale-py", ale_py.__version__,
      f"(pinned {ale_v})", "| mujoco", mujoco.__version__, f"(pinned {mujoco_v})")
gymnasium.make("HalfCheetah-v5").close()
if skip_rllib != "1":
    import ray, ray.rllib  # noqa: F401
EOF
    exit 1
fi
