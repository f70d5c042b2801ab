"""jitort's version: a leaf module, so that the compiler's modules can read it (the generated
code's cache key holds it) without importing the package facade."""
__version__ = "0.1.0"
