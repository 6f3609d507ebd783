"""A regular package, so that this repository's ``tests`` wins over the top-level ``tests`` package
that smdebug-rulesconfig (a dependency of sagemaker-train, the ``[member]`` extra) installs into
site-packages: a namespace package (no ``__init__``) loses to a regular one anywhere on the path."""
