"""scripts/setup-system.sh, which both README commands and .ci/run call: as root it
installs what the drills need; as a normal user it says what is missing and how to get it.
Run here against fake ``id``/``apt-get`` and an empty PATH: nothing on this machine changes."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "setup-system.sh"


def fake(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/bash\n{body}\n")
    path.chmod(0o755)


def run(
    tmp_path: Path, what: str, *, uid: int, apt: str = "exit 1"
) -> subprocess.CompletedProcess[str]:
    bin_dir, lib_dir = tmp_path / "bin", tmp_path / "lib"
    bin_dir.mkdir(exist_ok=True)
    lib_dir.mkdir(exist_ok=True)
    fake(bin_dir, "id", f"echo {uid}")
    if not (bin_dir / "python3").exists():
        (bin_dir / "python3").symlink_to(sys.executable)
    fake(bin_dir, "apt-cache", "exit 0")
    fake(bin_dir, "apt-get", f'echo "$@" >> {tmp_path}/apt-calls\n{apt}')
    env = {
        "PATH": str(bin_dir),
        "TMPDIR": str(tmp_path),
        "FAULTDRILL_SETUP_SBIN": "",
        "FAULTDRILL_SETUP_LIBDIRS": str(lib_dir),
        "FAULTDRILL_SETUP_PLATFORMS": "",  # the platforms' own scripts install for real
    }
    return subprocess.run(
        ["/bin/bash", str(SCRIPT), what], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("what", "packages"),
    [("demo", "iptables fuse libfuse2"), ("tests", "iptables fuse libfuse2 chromium")],
)
def test_as_a_normal_user_it_says_what_is_missing_and_how_to_get_it(
    tmp_path: Path, what: str, packages: str
) -> None:
    done = run(tmp_path, what, uid=1000)
    assert done.returncode == 0
    assert f"missing for the {what} (not root, so not installed)" in done.stdout
    assert "  - iptables: link faults" in done.stdout
    assert "  - libfuse2: the storage outage's unreachable mode" in done.stdout
    assert ("chromium: the HTML report's browser test" in done.stdout) == (what == "tests")
    assert f"sudo apt-get install -y --no-install-recommends {packages}\n" in done.stdout
    assert not (tmp_path / "apt-calls").exists()


def test_as_root_it_installs_what_is_missing(tmp_path: Path) -> None:
    installs = (
        f"for t in iptables fusermount chromium; do printf '#!/bin/sh\\n' > {tmp_path}/bin/$t; "
        f"/bin/chmod +x {tmp_path}/bin/$t; done; : > {tmp_path}/lib/libfuse.so.2"
    )
    done = run(tmp_path, "tests", uid=0, apt=installs)
    assert done.returncode == 0, done.stdout + done.stderr
    calls = (tmp_path / "apt-calls").read_text().splitlines()
    assert calls == ["install -y --no-install-recommends iptables fuse libfuse2 chromium"]
    assert "installed iptables fuse libfuse2 chromium" in done.stdout
    again = run(tmp_path, "tests", uid=0)
    assert again.returncode == 0 and "system packages for the tests present" in again.stdout


def test_as_root_it_fails_when_the_packages_cannot_be_installed(tmp_path: Path) -> None:
    done = run(tmp_path, "demo", uid=0)  # apt-get fails, update too
    assert done.returncode == 1
    assert "still missing after apt-get: iptables fuse libfuse2" in done.stderr
    assert (tmp_path / "apt-calls").read_text().splitlines() == [
        "install -y --no-install-recommends iptables fuse libfuse2",
        "update",
        "install -y --no-install-recommends iptables fuse libfuse2",
    ]


# --- the test command in CI mode ----------------------------------------------------------

ROOT = SCRIPT.parents[1]


def pytest_in_ci_mode(tmp_path: Path, path: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_one.py").write_text(
        "import pytest\n\n\ndef test_skips() -> None:\n    pytest.skip('no iptables here')\n"
    )
    env = {**os.environ, "FAULTDRILL_CI": "1", "PATH": path}
    argv = ["-q", "-p", "tests.ci_mode", "-p", "no:cacheprovider", "--rootdir", str(tmp_path)]
    return subprocess.run(
        [sys.executable, "-m", "pytest", *argv, str(tmp_path / "test_one.py")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="CI mode applies as root")
def test_in_ci_mode_a_machine_without_the_tools_fails_at_once(tmp_path: Path) -> None:
    done = pytest_in_ci_mode(tmp_path, str(tmp_path))  # a PATH with nothing on it
    assert done.returncode == 3, done.stdout + done.stderr
    out = done.stdout + done.stderr
    assert "CI mode as root: the drill tests would skip, this machine lacks: iptables" in out
    assert "run scripts/setup-system.sh tests" in out


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("iptables") is None or shutil.which("chromium") is None,
    reason="CI mode applies as root, on a machine set up for the drills",
)
def test_in_ci_mode_a_skipped_test_fails_the_run(tmp_path: Path) -> None:
    done = pytest_in_ci_mode(tmp_path, os.environ["PATH"])
    assert done.returncode == 1, done.stdout + done.stderr
    assert "CI mode as root: 1 test(s) skipped, which proves nothing" in done.stdout
    assert "test_one.py::test_skips: Skipped: no iptables here" in done.stdout


# --- --help ---------------------------------------------------------------------------------


def test_the_top_level_help_says_what_faultdrill_is_and_how_to_start() -> None:
    from faultdrill.cli import build_parser

    text = build_parser().format_help()
    assert "Prove whether a distributed training platform really recovers from faults." in text
    assert "The ``faultdrill`` command line" not in text
    assert "faultdrill demo " in text and "faultdrill run PLAN.yaml --out DIR" in text
    assert "exit status: 0 proven, 1 not proven, 2 bad input" in text


@pytest.mark.parametrize("command", ["run", "demo"])
def test_every_option_of_run_and_demo_is_explained_with_its_default(command: str) -> None:
    from faultdrill.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    options = sub.choices[command]._actions
    for action in options:
        if action.dest == "help":
            continue
        assert action.help, f"{command} {action.option_strings or action.dest}: no help"
        if action.option_strings:
            assert "(default: " in " ".join(action.help.split()), (command, action.dest)


# --- the README's two commands ----------------------------------------------------------------


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    quick = text[text.index("## Quick start") : text.index("## Commands")]
    return [block.split("```", 1)[0].strip() for block in quick.split("```bash\n")[1:]]


def test_both_readme_commands_set_the_system_up_first() -> None:
    demo, tests = readme_commands()
    assert demo.startswith("scripts/setup-system.sh demo && ")
    assert demo.endswith("faultdrill demo --out faultdrill-demo")
    assert tests.startswith("scripts/setup-system.sh tests && ")
    assert tests.endswith("&& pytest -q")


def test_ci_runs_the_readme_test_command_verbatim_in_ci_mode() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert readme_commands()[1] in ci.splitlines()
    assert "export FAULTDRILL_CI=1" in ci
