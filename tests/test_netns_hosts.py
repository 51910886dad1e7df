"""The test hosts of tests/netns_hosts.py: separate addresses that reach each other and
nothing else, hidden paths, and nothing left behind however a lab ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests import netns_hosts
from tests.netns_hosts import Lab, LabError

_REASON = netns_hosts.unavailable_reason()
if _REASON is not None:
    pytest.skip(_REASON, allow_module_level=True)

SERVE = textwrap.dedent("""
    import socket, sys
    s = socket.socket()
    s.bind((sys.argv[1], 5000))
    s.listen()
    print("listening", flush=True)
    while True:
        c, peer = s.accept()
        c.sendall(peer[0].encode())
        c.close()
""")
ASK = "import socket, sys; print(socket.create_connection((sys.argv[1], 5000), 10).recv(99))"


def namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def test_hosts_have_their_own_addresses_and_reach_each_other(tmp_path):
    with Lab(tmp_path) as lab:
        a, b = lab.add_host("a"), lab.add_host("b")
        assert a.address != b.address
        lab.spawn(a, [sys.executable, "-c", SERVE, a.address], log=tmp_path / "serve.log")
        netns_hosts.wait_for(lambda: "listening" in (tmp_path / "serve.log").read_text(),
                             120, "the server")
        asked = lab.run(b, [sys.executable, "-c", ASK, a.address], timeout=120)
        assert asked.returncode == 0, asked.stderr
        assert asked.stdout.strip() == repr(b.address.encode())  # b came from its own address
        # the machine's own network namespace is not on the lab's bridge
        own = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout
        assert netns_hosts.SUBNET + "." not in own


def test_a_lost_host_loses_its_processes_and_namespace(tmp_path):
    with Lab(tmp_path) as lab:
        a, b = lab.add_host("a"), lab.add_host("b")
        sleeper = lab.spawn(b, ["sleep", "600"])
        netns_hosts.wait_for(lambda: b.pids(), 30, "the sleeper")
        lab.kill_host(b)
        assert sleeper.poll() is not None and not b.alive
        assert b.netns not in namespaces() and a.netns in namespaces()
        with pytest.raises(LabError, match="is down"):
            lab.spawn(b, ["true"])


def test_hidden_paths_are_empty_for_the_hosts_processes_only(tmp_path):
    secret = tmp_path / "driver"
    secret.mkdir()
    (secret / "corpus.bc").write_bytes(b"BC")
    with Lab(tmp_path / "lab") as lab:
        h = lab.add_host("h")
        seen = lab.run(h, ["ls", "-A", str(secret)], timeout=60, hide=[secret])
        assert seen.returncode == 0 and seen.stdout == ""
        assert lab.run(h, ["ls", str(secret)], timeout=60).stdout.split() == ["corpus.bc"]
    assert (secret / "corpus.bc").read_bytes() == b"BC"  # hidden, not touched


def test_a_lab_cleans_up_on_an_exception_and_on_sigterm(tmp_path):
    with pytest.raises(RuntimeError), Lab(tmp_path) as lab:
        lab.add_host("a")
        prefix = lab.prefix
        raise RuntimeError("a test failing inside the lab")
    assert prefix not in namespaces()

    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).parents[1])!r})
        from tests.netns_hosts import Lab
        lab = Lab()
        lab.spawn(lab.add_host("a"), ["sleep", "600"])
        print(lab.prefix, flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    prefix = proc.stdout.readline().strip()
    assert prefix in namespaces()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) != 0
    assert prefix not in namespaces()


def test_the_namespaces_of_a_killed_lab_are_removed_by_the_next_one(tmp_path):
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(Path(__file__).parents[1])!r})
        from tests.netns_hosts import Lab
        lab = Lab()
        lab.add_host("a")
        print(lab.prefix, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # no cleanup of any kind runs
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    prefix = done.stdout.strip()
    assert prefix and prefix in namespaces()
    assert os.getpid() != int(prefix.split("-")[1])
    with Lab(tmp_path):
        assert prefix not in namespaces()
