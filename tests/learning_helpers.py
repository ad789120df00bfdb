"""Learning checks shared by the workflow tests (importable because pytest puts tests/ on
sys.path)."""


def greedy_returns_along_run(learner, first, every, episodes=5, stop_at=None):
    """Step ``learner`` until it is done, evaluating its greedy policy along the way.

    DQN's CartPole returns swing from one evaluation to the next (it has collapses), so a
    learning check takes the best evaluation along the run, not one at the end.

    Parameters
    ----------
    learner : Learner
        A built learner (stopped by the caller).
    first : int
        Env steps collected before the first evaluation.
    every : int
        Env steps between two evaluations after that.
    episodes : int
        Episodes of each evaluation.
    stop_at : float or None
        End the run early once an evaluation reaches this mean return (None: run to the end).

    Returns
    -------
    list of float
        The mean returns of the evaluations, in order.
    """
    returns, next_eval = [], first
    while not learner.done() and (stop_at is None or max(returns, default=float("-inf")) < stop_at):
        learner.step()
        if learner.num_samples_collected >= next_eval:
            returns.append(learner.evaluate(episodes))
            next_eval += every
    return returns
