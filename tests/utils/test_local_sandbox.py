"""The local sandbox: hostile programs fail with a clear status and message and change nothing outside their run."""

import os
import pathlib
import socket
import threading
import time
import uuid

import pytest

from verl.utils.sandbox import isolation_layers, run_python

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_stdin_stdout_stderr():
    result = run_python("import sys\nname = input()\nprint(name[::-1])\nprint('warn', file=sys.stderr)", stdin="abc\n")
    assert (result.status, result.exit_code, result.stdout, result.stderr) == ("ok", 0, "cba\n", "warn\n")
    assert not result.truncated and result.duration > 0
    failed = run_python("import sys; sys.exit(3)")
    assert (failed.status, failed.exit_code) == ("runtime_error", 3)


def test_large_output_is_truncated():
    result = run_python("print('é' * 1_000_000)", max_output_chars=1000)
    assert result.status == "ok" and result.truncated
    assert result.stdout == "é" * 1000


def test_infinite_loop_times_out():
    start = time.monotonic()
    result = run_python("while True: pass", timeout_s=1)
    assert result.status == "timeout" and "wall-clock limit of 1 s" in result.stderr
    assert time.monotonic() - start < 5


def test_timeout_kills_what_the_program_started():
    # guard=False so the program may start a process; the whole process group must die at the deadline
    code = "import subprocess\np = subprocess.Popen(['sleep', '60'])\nprint(p.pid, flush=True)\nwhile True: pass\n"
    result = run_python(code, timeout_s=1, guard=False)
    assert result.status == "timeout"
    status = pathlib.Path(f"/proc/{int(result.stdout)}/status")
    time.sleep(0.2)
    # gone, or a zombie waiting for this container's init to reap it: either way no longer running
    assert not status.exists() or "State:\tZ" in status.read_text()


def test_allocating_10_gb_is_a_memory_error():
    result = run_python("data = bytearray(10 * 1024 ** 3)\nprint('allocated')", memory_mb=512)
    assert result.status == "memory_error" and result.stdout == ""
    assert "MemoryError" in result.stderr and "512 MB" in result.stderr
    assert run_python("print(len(bytearray(50 * 1024 ** 2)))", memory_mb=512).stdout == "52428800\n"


@pytest.mark.parametrize("target", [f"/tmp/verl-sandbox-test-{uuid.uuid4().hex}", str(REPO / "sandbox-escape.txt")])
def test_writing_outside_its_dir_is_blocked(target):
    result = run_python(f"open({target!r}, 'w').write('escaped')")
    assert result.status == "blocked" and "is blocked" in result.stderr and target in result.stderr
    assert not os.path.exists(target)


def test_files_inside_its_dir_work_and_the_dir_is_removed(tmp_path):
    victim = tmp_path / "keep.txt"
    victim.write_text("mine")
    code = (
        "import os\nopen('a.txt', 'w').write('ok')\nos.mkdir('sub')\nprint(open('a.txt').read(), os.getcwd())\n"
        f"try:\n    os.remove({str(victim)!r})\nexcept PermissionError as e:\n    print(e)\n"
    )
    result = run_python(code)
    assert result.status == "ok", result.stderr
    first, second = result.stdout.splitlines()
    assert first.startswith("ok ") and "os.remove" in second and "is blocked" in second
    assert not os.path.exists(first.split(" ", 1)[1]) and victim.read_text() == "mine"


@pytest.fixture
def listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    yield server
    server.close()


def _assert_no_connection(server):
    with pytest.raises(BlockingIOError):
        server.accept()


def test_socket_to_localhost_is_blocked(listener):
    port = listener.getsockname()[1]
    result = run_python(
        f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')"
    )
    assert result.status == "blocked" and "network access" in result.stderr and result.stdout == ""
    _assert_no_connection(listener)


def test_kernel_layers_hold_without_the_audit_hook(listener):
    layers = isolation_layers()
    if not {"netns", "landlock-net"} & set(layers) or "landlock-fs" not in layers:
        pytest.skip(f"this machine allows only {layers}")
    port = listener.getsockname()[1]
    target = f"/tmp/verl-sandbox-test-{uuid.uuid4().hex}"
    code = (
        f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        "except OSError as e:\n    print('refused', e.errno)\n"
        f"open({target!r}, 'w').write('escaped')\n"
    )
    result = run_python(code, guard=False)
    assert "audit_hook" not in result.layers
    assert result.stdout.startswith("refused") and result.status == "runtime_error"
    assert "PermissionError" in result.stderr and not os.path.exists(target)
    _assert_no_connection(listener)


def test_runs_from_threads_stay_apart():
    results = [None] * 4

    def work(i):
        results[i] = run_python(f"import os\nopen('n', 'w').write('{i}')\nprint(open('n').read())")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(4)]


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match="timeout_s"):
        run_python("pass", timeout_s=0)
    with pytest.raises(ValueError, match="max_output_chars"):
        run_python("pass", max_output_chars=-1)
