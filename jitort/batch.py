"""The documented import path ``jitort.batch``: the very module :mod:`jitort.apps.batch`."""
import sys

from jitort.apps import batch as _impl

sys.modules[__name__] = _impl
