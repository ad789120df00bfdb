#!/usr/bin/env python
"""Train an agent from a YAML configuration: ``python train.py --conf FILE [KEY=VALUE ...]``.

The same as ``pytorchrl train FILE [KEY=VALUE ...]`` (see ``pytorchrl train --help``), for
use from a checkout without installing the console command.
"""

import argparse
import sys

from pytorchrl import cli


def main(argv=None):
    """Parse ``--conf FILE``, the overrides and the train options, then train; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="train.py", description=cli.TRAIN_DESCRIPTION + "\nThe same as 'pytorchrl train CONF'.",
        epilog=cli.TRAIN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conf", required=True, metavar="FILE",
                        help="YAML configuration file (e.g. examples/configs/ppo_cartpole.yaml)")
    cli.add_train_arguments(parser)
    args = cli.parse_args(parser, argv)
    args.handler = cli.train_command
    return cli.run_command(args)


if __name__ == "__main__":
    sys.exit(main())
