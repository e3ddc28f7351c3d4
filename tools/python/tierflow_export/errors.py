"""The exporter's two kinds of failure, and how a message is shown on one line."""


class ExportError(Exception):
    """Bad input: a flag, a file, or a model this exporter cannot handle."""


class InternalError(Exception):
    """A bug in this exporter (an invariant of the produced workload does not hold)."""


def one_line(e):
    """An exception's text on one line, at most 300 characters."""
    text = " ".join(str(e).split())
    return text if len(text) <= 300 else text[:297] + "..."
