"""Feature extractors: networks mapping observations to a flat feature vector.

Every extractor takes the observation space as its first argument (``input_space``) and
exposes its feature size as ``num_outputs``.
"""

from pytorchrl.agent.actors.feature_extractors.cnn import CNN
from pytorchrl.agent.actors.feature_extractors.dict_net import DictNet
from pytorchrl.agent.actors.feature_extractors.fixup import FixupCNN
from pytorchrl.agent.actors.feature_extractors.mlp import MLP, ParallelMLP

FEATURE_EXTRACTORS = {"mlp": MLP, "cnn": CNN, "fixup": FixupCNN, "dict": DictNet}


def get_feature_extractor(name):
    """Return the feature extractor class called ``name``.

    Parameters
    ----------
    name : str or type
        "MLP" (flat observations), "CNN" (Nature-DQN convolutions) or "Fixup" (IMPALA
        ResNet with Fixup initialisation) or "Dict" (Dict/Tuple observations: the vector
        keys through one MLP, each image key through a CNN), in any case; a class is returned unchanged.

    Returns
    -------
    type
        The nn.Module class; build it with ``cls(input_space, **kwargs)``.

    Raises
    ------
    ValueError
        If ``name`` is not one of the names above.
    """
    if isinstance(name, type):
        return name
    key = name.lower() if isinstance(name, str) else None
    if key not in FEATURE_EXTRACTORS:
        raise ValueError(f"unknown feature extractor {name!r}; valid names: MLP, CNN, Fixup, Dict")
    return FEATURE_EXTRACTORS[key]


__all__ = ["MLP", "ParallelMLP", "CNN", "FixupCNN", "DictNet", "get_feature_extractor"]
