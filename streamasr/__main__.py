"""`python -m streamasr ...` runs the command line, as the `streamasr` script does."""

from streamasr.cli import main

main()
