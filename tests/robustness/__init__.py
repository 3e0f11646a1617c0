"""`nox -s robustness`: a fuzz and a soak against a live server (a package, so that its
conftest.py does not take the place of tests/conftest.py, which other modules import)."""
