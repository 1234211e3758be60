"""The package's version, where every layer may read it (the node registry, /health, the OpenAPI
document, `--version`) without importing the public package, which imports everything."""

__version__ = "0.1.0"  # keep equal to pyproject.toml's [project] version
