"""Scheme layer: workers and their composition into training layouts."""

from pytorchrl.scheme.scheme import Scheme

__all__ = ["Scheme"]
