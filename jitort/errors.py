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


def run_driver(driver, *args) -> None:
    """Call a generated segment driver with ``args``, its failures as jitort's errors: an
    IndexError (raised by bounds-checked code) is an index input out of range, any other
    non-jitort exception an :class:`ExecutionError` naming it."""
    try:
        driver(*args)
    except IndexError as e:
        raise InvalidInput(f"{e} (an index input is out of range)") from None
    except JitortError:
        raise
    except Exception as e:
        raise ExecutionError(f"compiled segment failed: {type(e).__name__}: {e}") from e
