"""pytorchrl: a modular scheme builder for distributed reinforcement learning in PyTorch.

The package-level names are the constants shared by every layer: the two communication
modes of a scheme level and the keys under which rollouts travel between workers.
"""

from pytorchrl.gc_pause import freeze_torch_on_import as _freeze_torch_on_import

__version__ = "0.2.0"

# Whichever module imports torch first imports it with the garbage collector paused, and
# its objects are then frozen out of later collections: CPU time that every process using
# torch pays. A process that never needs torch (a data server) never imports it
# (pytorchrl/gc_pause.py).
_freeze_torch_on_import()

# Communication modes of a scheme level (collection or gradients).
SYNC = "synchronous"
ASYNC = "asynchronous"

# Keys of the rollout dictionaries exchanged between workers.
OBS = "obs"            # observation the action was taken from
OBS2 = "obs2"          # observation reached after the action (off-policy storages)
RHS = "rhs"            # recurrent hidden state
ACT = "act"            # action as stored (unclipped for continuous spaces)
REW = "rew"            # reward
DONE = "done"          # episode ended after this step (terminated or truncated)
TERM = "term"          # episode ended by termination: no bootstrapping
TRUNC = "trunc"        # episode ended by a time limit: bootstrapped with TRUNC_VAL
TRUNC_VAL = "trunc_val"  # value of the final observation of a truncated episode
VAL = "val"            # value estimate of OBS (one extra entry: value of the last obs)
LOGP = "logp"          # log-probability of ACT under the behaviour policy
RET = "ret"            # return target
ADV = "adv"            # advantage estimate
VERSION = "version"    # weight version that produced the data
DISCOUNT = "discount"  # replay: factor of the bootstrap value of OBS2 (gamma^n, 0 after termination)
WEIGHT = "weight"      # prioritized replay: importance-sampling weight of a sample
INDEX = "index"        # replay: where a sample sits in the buffer (for priority updates)
TD_ERROR = "td_error"  # per-sample |TD error| an algorithm reports for prioritized replay
TARGET = "target"      # training target computed by the collector (Algorithm.preprocess_rollout)
BOOTSTRAP_STEP = "bootstrap_step"  # recurrent replay: step of a sequence whose OBS2 bootstraps a target
IREW = "irew"          # intrinsic reward (RND_PPO: the predictor's error on OBS, normalised)
IVAL = "ival"          # intrinsic value estimate of OBS (one extra entry: of the last obs)
IRET = "iret"          # intrinsic return target
IADV = "iadv"          # intrinsic advantage estimate

__all__ = ["SYNC", "ASYNC", "OBS", "OBS2", "RHS", "ACT", "REW", "DONE", "TERM", "TRUNC",
           "TRUNC_VAL", "VAL", "LOGP", "RET", "ADV", "VERSION", "DISCOUNT", "WEIGHT", "INDEX",
           "TD_ERROR", "TARGET", "BOOTSTRAP_STEP", "IREW", "IVAL", "IRET", "IADV", "__version__"]
