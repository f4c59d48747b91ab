"""What the Python benchmarks share: atomic file writes, and their section of docs/benchmarks.md."""

import os


def write_atomically(path, text):
    """Writes `text` to `path` through a temporary file and a rename."""
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def replace_section(path, name, section, heading=None):
    """Puts `section` between <!-- NAME:begin --> and <!-- NAME:end --> in the markdown file
    `path`, or appends the markers with it (under `heading`, if given) where they are missing."""
    with open(path) as f:
        text = f.read()
    begin, end = "<!-- %s:begin -->" % name, "<!-- %s:end -->" % name
    if begin in text and end in text:
        text = text[:text.index(begin) + len(begin)] + "\n" + section + text[text.index(end):]
    else:
        title = "## %s\n\n" % heading if heading else ""
        text = text.rstrip("\n") + "\n\n" + title + begin + "\n" + section + end + "\n"
    write_atomically(path, text)
