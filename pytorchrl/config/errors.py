"""The error every configuration problem is reported with (reading, merging or validating)."""


class ConfigError(ValueError):
    """An invalid configuration.

    Parameters
    ----------
    path : str
        Dotted path of the offending key (``algorithm.lr``, ``schedules.0.start``); "" for
        the configuration as a whole.
    problem : str
        What is wrong, naming the value.
    source : str or None
        Where the value came from (a file name, an override), appended in parentheses.
    """

    def __init__(self, path, problem, source=None):
        self.path, self.problem, self.source = path, problem, source
        super().__init__(path, problem, source)

    def with_source(self, source):
        """A copy of this error that names ``source`` (where the value came from)."""
        return ConfigError(self.path, self.problem, source)

    def __str__(self):
        text = f"config error: {self.path + ': ' if self.path else ''}{self.problem}"
        text = text + (f" ({self.source})" if self.source else "")
        # The message is printed as one line: no value may break it.
        return " ".join(text.split())


__all__ = ["ConfigError"]
