"""The test suite (a package, so that tests/examples does not shadow the top-level examples package)."""
