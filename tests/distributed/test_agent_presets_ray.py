"""The agent presets whose example layout has remote workers (A3C, IMPALA, DD-PPO, Ape-X) train
a tiny budget on the session's Ray instance, with the layout of their scheme preset (the
others: tests/unit/test_agent_presets.py)."""

import pytest

from agent_preset_helpers import ON_RAY, train_tiny


@pytest.mark.parametrize("name", ON_RAY)
def test_agent_preset_trains_on_ray(name, ray_session):
    # The layout of the example's scheme preset ("a3c", "dd-ppo", "async-collectors") is
    # checked here, where it is built anyway, instead of by a tiny run of that preset
    # (LAYOUT_CHECKED_BY of tests/cli/test_cli_presets.py).
    train_tiny(name, check_layout=True)
