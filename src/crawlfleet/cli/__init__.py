"""Command-line interface: ``crawlfleet COMMAND`` (see :mod:`crawlfleet.cli.main`)."""
