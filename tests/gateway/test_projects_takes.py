"""gateway/projects_takes.py: the export's ASCII file name (`filename=` of its Content-Disposition)."""

import pytest

from gateway.projects_takes import ascii_filename


@pytest.mark.parametrize("name, expected", [
    ("Plain_name", "Plain_name"),
    ("Chapter 1", "Chapter-1"),
    ("Émile/Test", "Emile-Test"),  # the letter kept without its accent (it was "mile-Test")
    ("Café crème", "Cafe-creme"),
    ("Ærø", "r"),  # letters with no ASCII decomposition become '-', as before
    ("☃ Schnee", "Schnee"),
    ("a☃b", "a-b"),
    ("☃", ""),  # nothing left: the caller uses the project's id
])
def test_ascii_filename(name: str, expected: str) -> None:
    assert ascii_filename(name) == expected
