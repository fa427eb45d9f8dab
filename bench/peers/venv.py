"""The peers' own environment: ``.venv-peers`` at the repository's top, made with this
Python's ``venv`` and filled by pip from ``bench/peers/requirements.txt`` (exact versions),
again only when that file changed. The project's ``.venv`` is never touched."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from bench.peers.processes import ROOT

REQUIREMENTS = Path(__file__).with_name("requirements.txt")
VENV = ROOT / ".venv-peers"


def peers_python() -> Path:
    """The peers' interpreter, the environment made or brought up to date first.

    Raises:
        subprocess.CalledProcessError: venv or pip failed (their output on stderr).
    """
    python = VENV / "bin" / "python"
    stamp = VENV / "requirements.sha256"
    wanted = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "-r", str(REQUIREMENTS)], check=True, stdout=sys.stderr)
    stamp.write_text(wanted)
    return python


def versions(python: Path, packages: list[str]) -> dict[str, str]:
    """The installed version of each of ``packages`` in ``python``'s environment."""
    code = (
        "import sys; from importlib import metadata\n"
        "for p in sys.argv[1:]:\n"
        "    try: print(p, metadata.version(p))\n"
        "    except metadata.PackageNotFoundError: print(p, 'not installed')\n"
    )
    done = subprocess.run(
        [str(python), "-c", code, *packages], capture_output=True, text=True, check=True
    )
    return dict(line.split(" ", 1) for line in done.stdout.splitlines())
