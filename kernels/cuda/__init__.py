"""CUDA kernels (numba-cuda), named like their ``kernels/cpu`` counterparts.

Importing any module here but ``tunables`` imports ``numba.cuda``: only the CUDA backend does
that. Under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, set before ``numba.cuda`` is
imported) every kernel runs as Python threads, so nothing here uses warp intrinsics (shuffles,
ballots): reductions go through shared memory and ``syncthreads``.

Calling convention: a tensor is a flat, typed device array plus an element offset into it (the
workspace, a weight, an input), so one workspace array and integer offsets replace many array
arguments (each array argument costs ~3.5 us per launch on a real GPU). Every public function
here is a host-side launcher: it picks the grid and launches the ``_k`` kernel behind it, through
``launch.launch`` (so that a caller can record the launches and replay them).
"""
