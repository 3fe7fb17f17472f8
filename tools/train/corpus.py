"""The King James Bible from Debian's bible-kjv packages (the text is public domain; the
retrieval program's licence is in /usr/share/doc/bible-kjv-text/copyright), one verse per line,
split into a training text and a held-out text of whole books, so held-out text is unseen."""
import collections
import re
import subprocess

# Whole books held out (~1.9% of the verses): a narrative, a history, a prophet, a poem-like
# prophet, two epistles.
HELD_OUT = ("Ruth", "Est", "Jonah", "Joel", "Phi", "Jas")


def verses_by_book():
    """{book abbreviation: [verse text]} in canonical order, from the `bible` program."""
    out = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], capture_output=True, text=True, check=True).stdout
    books = collections.OrderedDict()
    for line in out.splitlines():
        found = re.match(r"(\d?[A-Za-z]+)(\d+):(\d+) (.*)", line)
        if found:
            books.setdefault(found.group(1), []).append(found.group(4).strip())
    if len(books) != 66:
        raise SystemExit(f"expected the 66 books of the KJV from `bible`, got {len(books)}")
    return books


def splits():
    """(training text, held-out text): verses one per line."""
    books = verses_by_book()
    train = [v for book, verses in books.items() if book not in HELD_OUT for v in verses]
    held = [v for book, verses in books.items() if book in HELD_OUT for v in verses]
    return "\n".join(train) + "\n", "\n".join(held) + "\n"


def package_version():
    out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "bible-kjv-text"], capture_output=True, text=True)
    return out.stdout.strip() or "unknown"
