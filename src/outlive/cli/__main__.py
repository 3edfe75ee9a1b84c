"""`python -m outlive.cli`: the `outlive` command."""

from outlive.cli import main

main()
