"""The devices :func:`jitort.compile` can compile for, as a table the backends register into.

Each device names a factory ``(model, **options) -> CompiledModel``. The CPU session
(:mod:`jitort.runtime`) registers ``"cpu"``; :mod:`jitort.cuda_runtime` registers ``"cuda"``
when it is imported. A backend whose module is heavy to import (``numba.cuda``) is listed in
:data:`_PROVIDERS` and imported the first time its device is asked for, so that ``import
jitort`` does not pay for it and the session never imports the backend modules itself.
"""
from __future__ import annotations

import importlib
from typing import Callable

from .errors import JitortError

#: device -> the module that registers it on import (imported when the device is first asked for)
_PROVIDERS = {"cuda": "jitort.cuda_runtime"}

_factories: dict[str, Callable] = {}


class UnknownDevice(JitortError, ValueError):
    """``compile(device=...)`` named a device no backend provides."""


def register(device: str, factory: Callable) -> None:
    """Compile models for ``device`` with ``factory(model, **options)``."""
    _factories[device] = factory


def factory(device: str) -> Callable:
    """The factory registered for ``device`` (its provider module imported first if need be)."""
    found = _factories.get(device)
    if found is None and isinstance(device, str) and device in _PROVIDERS:
        importlib.import_module(_PROVIDERS[device])
        found = _factories.get(device)
    if found is None:
        known = sorted(set(_factories) | set(_PROVIDERS))
        raise UnknownDevice(f"device must be one of {known}, got {device!r}")
    return found
