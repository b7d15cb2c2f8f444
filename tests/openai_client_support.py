"""What the Python client tests (check_openai_client.py, check_structured_output.py) share: the
virtualenv their clients run in, and a `minfer serve` started on a free port.

The virtualenv holds the official `openai` package (which brings pydantic) and `jsonschema`, pinned,
installed from PyPI once into $MINFER_CACHE (default ~/.cache/minfer)/openai-venv and then reused.
A stamp file named after the pinned set marks a finished install; a changed set makes the
virtualenv again. Without PyPI the calling test is skipped (exit 77) and says so.
"""
import os
import subprocess
import sys
import time

OPENAI_VERSION = "1.109.1"
PACKAGES = [f"openai=={OPENAI_VERSION}", "jsonschema==4.26.0"]
SKIP = 77


def venv_python():
    """The virtualenv's interpreter, after installing PACKAGES into it when its stamp is missing."""
    cache = os.environ.get("MINFER_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "minfer"))
    venv = os.path.join(cache, "openai-venv")
    python = os.path.join(venv, "bin", "python")
    stamp = os.path.join(venv, "installed-" + "-".join(p.replace("==", "-") for p in PACKAGES))
    if os.path.exists(stamp):
        return python
    started = time.time()
    try:
        subprocess.run([sys.executable, "-m", "venv", "--clear", venv], check=True, capture_output=True, timeout=300)
        subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *PACKAGES],
                       check=True, capture_output=True, timeout=600)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        detail = getattr(e, "stderr", b"") or b""
        print(f"skipped: could not install {' '.join(PACKAGES)} from PyPI into {venv}: "
              f"{detail.decode(errors='replace').strip().splitlines()[-1:]}")
        sys.exit(SKIP)
    open(stamp, "w").close()
    print(f"installed {' '.join(PACKAGES)} into {venv} in {time.time() - started:.1f} s")
    return python


def start_server(minfer, model, *args):
    """`minfer serve -m model` on 127.0.0.1 at a port the system picks, with `args` after; returns the
    process and its port once it listens, or fails the test with the server's log."""
    server = subprocess.Popen([minfer, "serve", "-m", model, "--host", "127.0.0.1", "--port", "0", *args],
                              stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    log = ""
    while time.time() < deadline:
        line = server.stderr.readline()
        if not line:
            break
        log += line
        if "listening on http://" in line:
            return server, int(line.rsplit(":", 1)[1])
    server.kill()
    sys.exit(f"FAIL: minfer serve did not start:\n{log}")
