"""The `kit` command line: one module per command, added to the root group explicitly in main.py."""
