"""pptl's commands, one module each; ``pptl/cli.py`` registers them on the typer app.

A command module imports only typer and :mod:`pptl.commands._shared` at its top and the library
inside the command's body, so that ``pptl --help`` and a small ``pptl check`` stay fast. To add one:

1. ``pptl/commands/<name>.py`` with a function whose docstring is its ``--help`` and whose
   parameters are ``Annotated`` options, the shared ones from :mod:`pptl.commands._shared`
   (``OutputFmt``, ``OutFile``, ``Microbatches``...) and values checked by its types (``Whole``,
   ``Number``, ``Choice``) so that a bad value reads like every other: ``--top: got -1, expected an
   integer >= 0``;
2. one line in :data:`pptl.cli.COMMANDS`;
3. raise :mod:`pptl.errors` for bad input (the app turns each into one line and its exit code), print
   results with ``out``/``print_json``, wrap long work in ``progress(...)``.
"""
