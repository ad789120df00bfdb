"""What the benchmark workers of several tasks share, ours and the peers' alike: they run with
our interpreter or with the peers' (``benchmarks/.venv-peers``, which has neither pytorchrl
nor its test extras), so the modules import the standard library at the top (``envs``:
gymnasium and numpy, which both sides have) and the libraries they measure inside functions.

- ``common``: both sides of a comparison: hyperparameter sets, solve criteria, command
  lines, greedy evaluation, record fields;
- ``ours``: our workers only (the value-loss form check, our PPO learner for SB3's
  objective, our actor's greedy evaluation);
- ``memsampler``: peak resident memory of a process tree;
- ``envs``: the environments of the distributed and scheme benchmarks.

Workers import it with ``benchmarks/`` on ``sys.path``; nothing is imported here.
"""
