"""The in-process scheme in a fresh interpreter: training, a hot-swap and an evaluation never
import Ray (in this process: tests/unit/test_learner.py)."""

import subprocess
import sys
import textwrap


IN_PROCESS = textwrap.dedent("""
    import sys
    import gymnasium as gym
    from pytorchrl.agent.actors import OnPolicyActor
    from pytorchrl.agent.algorithms import PPO
    from pytorchrl.agent.env import VecEnv
    from pytorchrl.agent.storages import GAEBuffer
    from pytorchrl.learner import Learner
    from pytorchrl.scheme import Scheme
    env, a, o = VecEnv.create_factory(gym.make, {"id": "CartPole-v1"}, vec_env_size=2)
    algo, name = PPO.create_factory(num_epochs=1, num_mini_batch=1)
    scheme = Scheme(algo_factory=algo, actor_factory=OnPolicyActor.create_factory(o, a, name),
                    storage_factory=GAEBuffer.create_factory(size=8), train_envs_factory=env,
                    test_envs_factory=VecEnv.create_factory(gym.make, {"id": "CartPole-v1"})[0])
    learner = Learner(scheme, target_steps=32)
    while not learner.done():
        learner.step()
    learner.update_algorithm_parameter("lr", 1e-4)
    learner.evaluate(1)
    learner.stop()
    assert "ray" not in sys.modules, "the in-process scheme imported ray"
    print("NO-RAY-OK")
""")


def test_in_process_scheme_never_imports_ray():
    proc = subprocess.run([sys.executable, "-c", IN_PROCESS], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "NO-RAY-OK" in proc.stdout
