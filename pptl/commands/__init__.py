"""pptl's commands, one module each; ``pptl/cli.py`` registers them on the typer app.

A command module imports only typer and :mod:`pptl.commands._shared` at its top and the library
inside the command's body, so that ``pptl --help`` and a small ``pptl check`` stay fast.
"""
