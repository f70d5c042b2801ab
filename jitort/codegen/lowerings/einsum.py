"""CPU lowerings: Einsum, in the forms exporters emit, as transposes, reshapes and batched GEMMs."""
from __future__ import annotations
