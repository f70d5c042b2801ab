"""Expansions of other domains' ops into default-domain subgraphs, one module per op family,
each registering with :func:`jitort.passes.expand.expansion`; every module here is imported by
:func:`jitort.passes.expand.expand_other_domains` on its first run (no list to edit)."""
