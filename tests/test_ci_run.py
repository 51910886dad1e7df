"""`.ci/run`, run on a copy of itself whose README holds stand-in install and test commands."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

CI_RUN = Path(__file__).resolve().parent.parent / ".ci" / "run"


def run_ci(tmp_path: Path, install: str, test: str) -> subprocess.CompletedProcess[str]:
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy2(CI_RUN, repo / ".ci" / "run")
    (repo / "README.md").write_text(
        "# x\n\n<!-- ci:install -->\n```\n" + install + "\n```\n\n"
        "<!-- ci:test -->\n```\n" + test + "\n```\n"
    )
    return subprocess.run(["bash", str(repo / ".ci" / "run")], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path)})


def test_a_test_command_that_collects_no_tests_fails_ci_loudly(tmp_path: Path) -> None:
    res = run_ci(tmp_path, "true", "exit 5")

    assert res.returncode == 1
    assert "CI FAILED: the test command collected no tests" in res.stderr


def test_test_failures_and_successes_pass_through(tmp_path: Path) -> None:
    assert run_ci(tmp_path / "a", "true", "exit 3").returncode == 3
    assert run_ci(tmp_path / "b", "true", "true").returncode == 0


def test_both_steps_share_a_new_empty_cache_dir_that_is_removed_afterwards(
        tmp_path: Path) -> None:
    log = tmp_path / "log"
    install = (f'echo "$MLGO_CACHE_DIR" >> {log}; ls -A "$MLGO_CACHE_DIR" | wc -l >> {log}; '
               'touch "$MLGO_CACHE_DIR/from-install"')
    test = f'echo "$MLGO_CACHE_DIR" >> {log}; ls -A "$MLGO_CACHE_DIR" >> {log}'

    res = run_ci(tmp_path, install, test)

    assert res.returncode == 0, res.stderr
    install_dir, entries_at_start, test_dir, seen_by_tests = log.read_text().split()
    assert install_dir == test_dir and install_dir.startswith(str(tmp_path))
    assert entries_at_start == "0"
    assert seen_by_tests == "from-install"
    assert not Path(install_dir).exists()
