"""Applications built on the compiler: the ``jitort`` command line (:mod:`.cli`) and batch
inference over Parquet, locally (:mod:`.batch`, :mod:`.rows`) or on Ray Data (:mod:`.ray`).

The compiler (the rest of :mod:`jitort`) never imports this package.
"""
