"""Root conftest: import jitort first so its environment defaults apply before numpy/numba load."""
import jitort  # noqa: F401
