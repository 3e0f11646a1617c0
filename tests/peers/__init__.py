"""`nox -s engines`: real vLLM beside our server (a package, so that its conftest.py does not
take the place of tests/conftest.py, which other test modules import as `conftest`)."""
