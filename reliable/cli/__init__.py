"""The `reliable` command line."""
