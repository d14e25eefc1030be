"""The ``innet`` command line. Nothing outside this package imports it; it is the one place
that turns exceptions into one-line messages and exit codes."""
