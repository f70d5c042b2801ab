"""The documented import path ``jitort.ray``: the very module :mod:`jitort.apps.ray`."""
import sys

from jitort.apps import ray as _impl

sys.modules[__name__] = _impl
