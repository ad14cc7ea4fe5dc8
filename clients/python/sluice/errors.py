"""The errors the client raises. Each names what went wrong in words a
training script's log can be read by."""


class SluiceError(Exception):
    """Base of every error the client raises."""


class AgentError(SluiceError):
    """The agent cannot serve this client: it is unreachable, stopped (503),
    refused the request (409: another world size, a conflicting resume), or
    the connection broke mid-response. The training script should exit and
    restart from its last checkpoint (what torchrun does): a batch in flight
    when the connection broke may have been handed out."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status


class JobEnded(SluiceError):
    """The job ended before this rank got every batch: it was cancelled,
    failed or deleted (the agent's 410 with `Sluice-End: ended`). The
    message is the agent's."""


class CorruptBatch(SluiceError):
    """A response that is not a well-formed batch; the message says what
    was wrong with it."""


class UnsupportedTransform(SluiceError, ValueError):
    """from_torchvision met a transform, or an argument of one, that no
    Sluice op reproduces. `transform` names the transform's class;
    `argument` the argument (None when the transform as a whole has no
    Sluice op)."""

    def __init__(self, transform, argument, reason):
        self.transform = transform
        self.argument = argument
        self.reason = reason
        where = transform if argument is None else f"{transform}({argument}=...)"
        super().__init__(f"{where}: {reason}")
