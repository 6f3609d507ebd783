"""`gpu-governance`: one module per command group; ``main`` builds the parser from them."""

from .main import EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK, build_parser, main

__all__ = ["EXIT_BAD_INPUT", "EXIT_FINDINGS", "EXIT_OK", "build_parser", "main"]
