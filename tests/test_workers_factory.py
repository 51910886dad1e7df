"""`make_executor`: what each --cluster value means, and clear errors for the rest."""

from __future__ import annotations

import sys

import pytest

from pymlgo.workers import CLUSTER_HELP, ExecutorError, make_executor


@pytest.mark.parametrize(
    "cluster", ["ray", "ray-remote", "ray://", "ray://host", "ray://host:port", "pool", "k8s"]
)
def test_a_malformed_cluster_value_is_a_value_error_listing_the_valid_forms(cluster):
    with pytest.raises(ValueError, match="ray-local|ray://HOST:PORT"):
        make_executor(cluster)


def test_the_help_text_names_every_form():
    for form in ("ray-local", "ray://HOST:PORT", "pool:NAME"):
        assert form in CLUSTER_HELP


def test_ray_missing_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    with pytest.raises(ExecutorError, match=r"pip install 'pymlgo\[ray\]'"):
        make_executor("ray-local")
    with pytest.raises(ExecutorError, match=r"pip install 'pymlgo\[ray\]'"):
        make_executor("ray://10.0.0.1:10001")  # refused before any connection is tried


def test_a_pool_is_sized_by_its_server_not_by_the_client():
    with pytest.raises(ValueError, match="mlgo pool serve --workers"):
        make_executor("pool:x", 4)


@pytest.mark.parametrize("name", ["", "../etc", "a/b", "x" * 65])
def test_a_bad_pool_name_is_refused(name, tmp_path, monkeypatch):
    monkeypatch.setenv("MLGO_RUNTIME_DIR", str(tmp_path))
    with pytest.raises(ValueError, match="bad pool name"):
        make_executor(f"pool:{name}")


def test_zero_workers_is_refused():
    with pytest.raises(ValueError, match=">= 1"):
        make_executor(None, 0)


def test_a_runtime_dir_others_can_enter_is_refused(tmp_path, monkeypatch):
    (tmp_path / "pools").mkdir(mode=0o755)
    (tmp_path / "pools").chmod(0o755)
    monkeypatch.setenv("MLGO_RUNTIME_DIR", str(tmp_path))
    with pytest.raises(ExecutorError, match="mode 0700"):
        make_executor("pool:x")
