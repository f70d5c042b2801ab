"""The devices :func:`jitort.compile` can compile for, as a table the backends register into.

Each device names a factory ``(model, **options) -> CompiledModel``. The CPU session
(:mod:`jitort.runtime`) registers ``"cpu"`` and :mod:`jitort.cuda_runtime` registers ``"cuda"``
when imported. :data:`_PROVIDERS` names the module of each device, imported the first time the
device is asked for: the session never imports a backend module (``numba.cuda`` loads only when
``device="cuda"`` is asked for), and a module below the session can compile a model through
``factory("cpu")`` without importing :mod:`jitort.runtime`.
"""
from __future__ import annotations

import importlib
from typing import Callable

from .errors import JitortError

#: device -> the module that registers it on import (imported when the device is first asked for)
_PROVIDERS = {"cpu": "jitort.runtime", "cuda": "jitort.cuda_runtime"}

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
