#!/usr/bin/env python3
"""Print the archive URI that apt already uses for a Debian suite (argv[1], e.g. bookworm), from
the deb822 `.sources` files or the one-line `sources.list` format; exit 1 if none names it."""
import glob
import re
import sys


def deb822(paths, suite):
    for path in paths:
        try:
            text = open(path, encoding="utf-8").read()
        except OSError:
            continue
        for stanza in text.split("\n\n"):
            fields = {}
            for line in stanza.splitlines():
                if ":" in line and not line.startswith((" ", "#")):
                    key, value = line.split(":", 1)
                    fields[key.strip().lower()] = value.split()
            if "deb" in fields.get("types", []) and suite in fields.get("suites", []) and fields.get("uris"):
                return fields["uris"][0]
    return None


def one_line(paths, suite):
    for path in paths:
        try:
            lines = open(path, encoding="utf-8").read().splitlines()
        except OSError:
            continue
        for line in lines:
            # Options in brackets ([arch=amd64 signed-by=...]) may hold spaces.
            words = re.sub(r"\[[^\]]*\]", " ", line.split("#", 1)[0]).split()
            if len(words) >= 3 and words[0] == "deb" and words[2] == suite:
                return words[1]
    return None


def main():
    suite = sys.argv[1]
    uri = deb822(sorted(glob.glob("/etc/apt/sources.list.d/*.sources")), suite) or one_line(["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list")), suite)
    if not uri:
        return 1
    print(uri)
    return 0


if __name__ == "__main__":
    sys.exit(main())
