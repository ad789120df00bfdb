"""Installation of pytorchrl.

torch is asked for as a range: install the CPU build first on machines without a GPU
(``pip install torch==2.13.0``, see README), otherwise pip fetches a multi-GB CUDA build.
"""

from setuptools import find_packages, setup

setup(
    name="pytorchrl",
    version="0.2.0",
    description="A modular scheme builder for distributed reinforcement learning in PyTorch",
    long_description=open("README.md").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    packages=find_packages(include=["pytorchrl", "pytorchrl.*"]),
    # The agent presets (top-level 'preset: NAME' of a configuration) are YAML files.
    package_data={"pytorchrl.config": ["presets/*.yaml"]},
    python_requires=">=3.9",
    install_requires=[
        "torch>=2.1,<3",
        "ray>=2.40",
        "gymnasium>=1.0",
        "numpy>=1.24",
        "lz4>=4.0",
        "pyyaml>=6.0",
        "threadpoolctl>=3.0",
        # Every run writes TensorBoard event files (the README's quick start shows them).
        "tensorboard>=2.10",
    ],
    extras_require={
        # The test suite draws plots, writes videos and checks that no worker process outlives a
        # run (psutil), and steps real Atari games, MuJoCo tasks and MiniGrid gridworlds (the
        # "atari", "mujoco", "robotics" and "minigrid" extras), and writes offline Weights & Biases
        # runs (the "wandb" extra); pytest-xdist runs the suite on two workers. pygame-ce, not pygame:
        # minigrid needs pygame-ce, which installs into the same "pygame" package, and
        # gymnasium's classic-control rendering runs on either.
        # Ray Tune (the "tune" extra) runs tests/distributed/test_tune.py.
        "test": ["pytest>=7", "pytest-timeout>=2", "pytest-xdist>=3", "psutil>=5", "matplotlib>=3.6",
                 "pillow>=9", "imageio>=2.9", "imageio-ffmpeg>=0.4", "pygame-ce>=2.4",
                 "ale-py>=0.9", "mujoco>=3,<3.12", "gymnasium-robotics>=1.4.2", "wandb>=0.20", "minigrid>=2.3",
                 "ray[tune]>=2.9"],
        # pytorchrl.envs.atari: the Arcade Learning Environment; ale-py ships the game ROMs.
        "atari": ["ale-py>=0.9"],
        # pytorchrl.envs.mujoco: gymnasium's MuJoCo v5 tasks (HalfCheetah-v5, ...).
        "mujoco": ["mujoco>=3"],
        # pytorchrl.envs.robotics: gymnasium-robotics' goal tasks (FetchReach-v4, ...). Its 1.4
        # releases build the Fetch models only with MuJoCo before 3.12 (a joint-type comparison
        # that newer MuJoCo bindings refuse), hence the pin, which the test extra shares: with
        # MuJoCo 3.11 both FetchReach-v4 and gymnasium's MuJoCo v5 tasks build.
        "robotics": ["gymnasium-robotics>=1.4.2", "mujoco>=3,<3.12"],
        # pytorchrl.envs.minigrid: the MiniGrid gridworlds (MiniGrid-Empty-5x5-v0, ...).
        "minigrid": ["minigrid>=2.3"],
        # Box2D tasks (LunarLander-v3, LunarLanderContinuous-v3, BipedalWalker-v3): rows of
        # benchmarks/zoo.
        "box2d": ["box2d>=2.3.10"],
        # learner.wandb: experiment tracking with Weights & Biases (pytorchrl.tools.tracking).
        "wandb": ["wandb>=0.20"],
        "bench": ["psutil>=5"],
        "plot": ["matplotlib>=3.6"],                 # pytorchrl plot
        # pytorchrl.tune.Trainable: Ray Tune's schedulers (PBT, PB2) perturbing in place.
        "tune": ["ray[tune]>=2.9"],
        "tensorboard": [],                           # (installed with pytorchrl now; kept for old commands)
        # pytorchrl evaluate --video: GIF (Pillow), MP4 (imageio-ffmpeg), and pygame (its
        # pygame-ce edition, which minigrid needs too), which gymnasium's classic-control
        # environments render with.
        "video": ["pillow>=9", "imageio>=2.9", "imageio-ffmpeg>=0.4", "pygame-ce>=2.4"],
        "all": ["matplotlib>=3.6", "pillow>=9", "imageio>=2.9", "imageio-ffmpeg>=0.4",
                "pygame-ce>=2.4"],
    },
    entry_points={"console_scripts": ["pytorchrl=pytorchrl.cli:main"]},
)
