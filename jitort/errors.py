"""jitort's exception hierarchy. Every error names the culprit (input, node or file)."""


class JitortError(Exception):
    """Base class of every error jitort raises on purpose."""


class InvalidModel(JitortError, ValueError):
    """The model cannot be read or is malformed (bad bytes, cycles, undefined values...)."""


class UnsupportedOp(InvalidModel):
    """No backend and no reference implementation can run this node."""


class InvalidInput(JitortError, ValueError):
    """A feed does not match the model (name, dtype, rank, dims) or is otherwise unusable."""


class ExecutionError(JitortError, RuntimeError):
    """A kernel or the interpreter failed while running a node."""


class InvalidOption(JitortError, ValueError):
    """A setting (a ``JITORT_*`` environment variable or a keyword option) has a value jitort
    cannot use; the message names it and the allowed values (:mod:`jitort.options`)."""
