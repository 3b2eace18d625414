"""Typer commands, one module per command group; cli.py registers them."""
