"""The runtime's errors: bad input, a plan that cannot run, a bug."""


class InputError(ValueError):
    """Bad input: a flag, a file, or a model that does not match the plan's workload."""


class PlanError(RuntimeError):
    """The plan cannot run as written: a step needs a tensor that is not where the plan
    says, waits on an event no earlier step issued, or reads a copy that is not current.
    The message names the step (its index in the program and what it is)."""

    def __init__(self, step, message, workload=None):
        self.step = step
        where = ""
        if step is not None:
            what = step.describe(workload) if workload is not None else step.kind
            where = f"step {step.index} ({what}): "
        super().__init__(where + message)


class UnsupportedError(InputError):
    """A model construct the runtime does not execute (named in the message)."""
