"""MiniGrid's mission text as the agent reads it (``observation: dict``): a bag of word bits.
Needs no minigrid package (the family's tests in test_minigrid_env.py do)."""


import numpy as np

from pytorchrl.envs.minigrid import MISSION_BITS, mission_bits


def test_each_word_sets_its_bit_and_order_and_case_do_not_matter():
    bits = mission_bits("get to the green goal square")
    assert bits.dtype == np.int8 and bits.shape == (MISSION_BITS,)
    assert bits.sum() == 6
    assert np.array_equal(bits, mission_bits("Square goal green the to get."))
    assert not np.array_equal(bits, mission_bits("get to the red goal square"))
    assert np.array_equal(mission_bits("go to the red ball, then pick up the key"),
                          mission_bits("go to the red ball then pick up the key"))
