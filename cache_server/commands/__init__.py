"""One module per CLI command; registered in :data:`cache_server.cli.COMMANDS`."""
