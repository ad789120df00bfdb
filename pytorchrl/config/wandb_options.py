"""Whether a configuration's ``learner.wandb`` section asks for a Weights & Biases run, and
the ``wandb`` module it then needs (the configuration refuses the section before anything
starts when the package is missing; ``pytorchrl.tools.tracking`` runs the W&B run).
"""

#: The line said when the configuration asks for W&B and the package is missing.
INSTALL_HINT = 'needs the wandb package: pip install "pytorchrl[wandb]"'


def wandb_wanted(options):
    """True when the ``learner.wandb`` section ``options`` (a mapping or None) asks for a
    W&B run: given, with a mode other than ``disabled``."""
    return options is not None and options.get("mode") != "disabled"


def import_wandb():
    """The ``wandb`` module.

    Raises
    ------
    ImportError
        With ``INSTALL_HINT`` when the package is not installed.
    """
    try:
        import wandb
    except ImportError as exc:
        raise ImportError(f"learner.wandb {INSTALL_HINT}") from exc
    return wandb
