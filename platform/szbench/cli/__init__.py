"""The ``szbench`` command line: one thin layer over the same services the API uses."""
