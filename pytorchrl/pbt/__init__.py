"""Population-based training in place (``pytorchrl pbt``): a population of runs whose worst
members take over the best members' policies and perturb their hyperparameters by
hot-swap, without restarting any process.

:mod:`~pytorchrl.pbt.explore` makes the decisions (who copies whom, the perturbed values),
:mod:`~pytorchrl.pbt.member` is one member (a training job trained an interval at a time),
:mod:`~pytorchrl.pbt.population` runs the population (population.csv, Ctrl-C and resume),
its members as Ray actors or interleaved in one process (:mod:`~pytorchrl.pbt.members`). :mod:`pytorchrl.tune` offers the same
in-place perturbations to Ray Tune's schedulers.
"""

from pytorchrl.pbt.explore import Parameter, perturb, plan_exploits
from pytorchrl.pbt.member import Member, member_name
from pytorchrl.pbt.population import (POPULATION_CSV, POPULATION_STATE, InProcessMembers, Population, RayMembers,
                                      is_population, member_config)

__all__ = ["Population", "Member", "InProcessMembers", "RayMembers", "Parameter", "perturb", "plan_exploits",
           "member_name", "member_config", "is_population", "POPULATION_CSV", "POPULATION_STATE"]
