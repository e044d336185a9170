"""The package as a user installs it: a wheel built from this checkout, installed in a fresh
virtualenv outside it, finds the pinned agents in the per-user engines directory, runs an offline
turn, and ``agentrun engines install`` runs ``npm ci`` on the shipped manifests.

The wheel is built without build isolation and installed without an index (the tests run in a
loopback-only namespace); the fresh environment reaches pydantic and anyio through a ``.pth``
line naming this virtualenv's site-packages, which adds that directory only (not its ``.pth``
files, so not this checkout's editable install).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from repo_paths import REPO

pytestmark = pytest.mark.timeout(120)


@dataclass(frozen=True)
class Installed:
    venv: Path
    wheel: Path
    home: Path

    @property
    def agentrun(self) -> str:
        return str(self.venv / "bin" / "agentrun")

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    def env(self, **extra: str) -> dict[str, str]:
        """A user's environment: nothing of this checkout (no PYTHONPATH, no engines dir)."""
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "AGENTRUN_ENGINES_DIR", "XDG_DATA_HOME", "VIRTUAL_ENV")
        }
        env["HOME"] = str(self.home)
        env["PATH"] = os.pathsep.join([str(self.venv / "bin"), env.get("PATH", "")])
        env.update(extra)
        return env

    def run(self, *argv: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.agentrun, *argv],
            cwd=self.home,
            env=self.env(**env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def _pip(*argv: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"pip {' '.join(argv)}:\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    pytest.importorskip("hatchling", reason="building the wheel needs hatchling (the test extra)")
    root = tmp_path_factory.mktemp("wheel")
    dist = root / "dist"
    _pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(dist), str(REPO))
    (wheel,) = dist.glob("agentrun_py-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    _pip("--python", str(venv / "bin" / "python"), "install", "--no-deps", "--no-index", str(wheel))
    site = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    (Path(site) / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    home = root / "home"
    home.mkdir()
    return Installed(venv, wheel, home)


def test_the_wheel_ships_the_pinned_manifests(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())
        for name in ("package.json", "package-lock.json"):
            shipped = wheel.read(f"agentrun/_engines/{name}")
            assert shipped == (REPO / "engines" / name).read_bytes()
        assert {"agentrun/_vocabulary/catalog.json", "agentrun/_vocabulary/prices.json"} <= names
        # agentrun view's page: its script and style, read from the package
        assert {"agentrun/_cli/view_page.js", "agentrun/_cli/view_page.css"} <= names
        metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
        assert "Name: agentrun-py\n" in wheel.read(metadata).decode()


def test_the_installed_command_is_the_wheels(installed: Installed) -> None:
    done = installed.run("--help")
    assert done.returncode == 0, done.stderr
    assert "engines" in done.stdout and "run" in done.stdout
    where = subprocess.run(
        [installed.python, "-c", "import agentrun; print(agentrun.__file__)"],
        cwd=installed.home, env=installed.env(), capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert where.startswith(str(installed.venv)), where


@pytest.mark.agent
def test_an_offline_run_finds_the_agents_in_the_user_engines_dir(installed: Installed) -> None:
    data = installed.home / "data"
    engines = data / "agentrun" / "engines"
    engines.mkdir(parents=True)
    (engines / "node_modules").symlink_to((REPO / "engines" / "node_modules").resolve())
    without = installed.run("run", "--json", "say hi", XDG_DATA_HOME=str(installed.home / "none"))
    assert without.returncode == 2, without.stderr
    assert "agentrun engines install" in without.stderr

    done = installed.run("run", "--json", "say hi", XDG_DATA_HOME=str(data))
    assert done.returncode == 0, done.stderr
    messages = [json.loads(line) for line in done.stdout.splitlines()]
    assert messages[0]["type"] == "init" and messages[-1]["type"] == "result"
    assert any(m["type"] == "tool_result" for m in messages)

    view = installed.run("engines", "--json", "--engine", "claude", XDG_DATA_HOME=str(data))
    assert view.returncode == 0, view.stderr
    (report,) = [json.loads(line) for line in view.stdout.splitlines()]
    assert report["engine"] == "claude" and report["ok"] is True
    assert report["version"] and report["pinned"], report


def _fake_npm(directory: Path, *, status: int = 0) -> Path:
    bin_dir = directory / "fake-bin"
    bin_dir.mkdir()
    npm = bin_dir / "npm"
    npm.write_text(
        "#!/bin/sh\n"
        'printf "%s\\n" "$PWD" "$*" > "$FAKE_NPM_LOG"\n'
        'ls package.json package-lock.json >> "$FAKE_NPM_LOG"\n'
        f"exit {status}\n"
    )
    npm.chmod(0o755)
    return bin_dir


def test_engines_install_runs_npm_ci_in_the_user_engines_dir(
    installed: Installed, tmp_path: Path
) -> None:
    bin_dir = _fake_npm(tmp_path)
    log = tmp_path / "npm.log"
    data = tmp_path / "data"
    path = os.pathsep.join([str(bin_dir), installed.env()["PATH"]])
    done = installed.run(
        "engines", "install", XDG_DATA_HOME=str(data), PATH=path, FAKE_NPM_LOG=str(log)
    )
    assert done.returncode == 0, done.stderr
    target = data / "agentrun" / "engines"
    cwd, args, *files = log.read_text().splitlines()
    assert Path(cwd).resolve() == target.resolve()
    assert args.split()[0] == "ci"
    assert files == ["package-lock.json", "package.json"]
    assert (target / "package-lock.json").read_bytes() == (
        REPO / "engines" / "package-lock.json"
    ).read_bytes()
    assert str(target) in done.stdout

    # $AGENTRUN_ENGINES_DIR, or --dir, choose another directory.
    other = tmp_path / "other"
    done = installed.run(
        "engines", "install", AGENTRUN_ENGINES_DIR=str(other), PATH=path, FAKE_NPM_LOG=str(log)
    )
    assert done.returncode == 0, done.stderr
    assert Path(log.read_text().splitlines()[0]).resolve() == other.resolve()


def test_engines_install_without_npm_or_with_a_failing_npm_is_a_clear_error(
    installed: Installed, tmp_path: Path
) -> None:
    done = installed.run("engines", "install", "--dir", str(tmp_path / "e"), PATH="/nonexistent")
    assert done.returncode == 2, done.stderr
    assert "npm" in done.stderr and "Node.js" in done.stderr

    bin_dir = _fake_npm(tmp_path, status=7)
    path = os.pathsep.join([str(bin_dir), installed.env()["PATH"]])
    done = installed.run(
        "engines", "install", "--dir", str(tmp_path / "f"), PATH=path,
        FAKE_NPM_LOG=str(tmp_path / "log"),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "exit status 7" in done.stderr
