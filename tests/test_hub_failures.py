"""A push that cannot succeed ends, in bounded time, with one error line saying where the complete folder is.

Each test points `huggingface_hub` at a local socket on 127.0.0.1 (a server that accepts and never answers, a port
nobody listens on, a server answering HTML, a server answering 503) with a throwaway token; nothing leaves the
machine.
"""

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import huggingface_hub.constants
import pytest
from conftest import FIXTURES

from elmo_hf.cli.convert import main

OPTIONS = FIXTURES / "allennlp" / "options.json"
WEIGHTS = FIXTURES / "allennlp" / "lm_weights.hdf5"


@pytest.fixture
def online(monkeypatch):
    """Lets this process reach an endpoint the test chooses (the suite runs with HF_HUB_OFFLINE=1)."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)

    def use(endpoint: str):
        monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", endpoint)

    return use


@contextmanager
def local_server(status: int | None, body: bytes = b"",
                 content_type: str = "application/json") -> Iterator[tuple[str, list[str]]]:
    """A server on 127.0.0.1 answering every request with `status` and `body`, or never answering if `status` is
    None (it reads the request and waits); yields (url, the request paths it got)."""
    requests, stop = [], threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            requests.append(self.path)
            if status is None:
                stop.wait()
                return
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
        thread.join()


def closed_port() -> str:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def push(output: Path, *options: str) -> tuple[int, float]:
    """Converts the fixture into `output` and pushes it to me/elmo; returns (exit status, seconds taken)."""
    started = time.monotonic()
    status = main(["--options", str(OPTIONS), "--weights", str(WEIGHTS), "--output", str(output),
                   "--push-to-hub", "me/elmo", "--token", "hf_fake_token", *options])
    return status, time.monotonic() - started


def assert_folder_kept(output: Path, err: str, cause: str):
    assert err.startswith(f"error: pushing to me/elmo failed ({cause}") and "Traceback" not in err, err
    assert f"The converted folder is complete at {output}; push it later with: hf upload me/elmo {output}" in err
    assert (output / "model.safetensors").is_file() and (output / "README.md").is_file()


def test_server_that_never_answers(tmp_path, capsys, online):
    """Each call waits --hub-timeout, is retried --hub-retries times, and the push ends (it hung forever before)."""
    with local_server(None) as (url, requests):
        online(url)
        result = []
        thread = threading.Thread(target=lambda: result.append(push(tmp_path / "out", "--hub-timeout", "0.5",
                                                                    "--hub-retries", "2")), daemon=True)
        thread.start()
        thread.join(timeout=120)
        assert not thread.is_alive(), "the push still hangs after 120 s"
        [(status, seconds)] = result
        assert status == 1 and requests.count("/api/repos/create") == 3
    assert_folder_kept(tmp_path / "out", capsys.readouterr().err, "ReadTimeout")
    print(f"push against a silent server ended after {seconds:.1f} s")


def test_connection_refused(tmp_path, capsys, online):
    online(closed_port())
    status, _ = push(tmp_path / "out", "--hub-retries", "1")
    assert status == 1
    assert_folder_kept(tmp_path / "out", capsys.readouterr().err, "ConnectError")


def test_answer_that_is_not_json(tmp_path, capsys, online):
    with local_server(200, b"<html>Down for maintenance</html>", "text/html") as (url, requests):
        online(url)
        status, _ = push(tmp_path / "out", "--private", "--revision", "dev")
    assert status == 1 and requests == ["/api/repos/create"]
    err = capsys.readouterr().err
    assert_folder_kept(tmp_path / "out", err, "JSONDecodeError")
    assert f"hf upload me/elmo {tmp_path / 'out'} --private --revision dev" in err


def test_server_errors_are_retried_as_huggingface_hub_retries_them(tmp_path, capsys, online):
    with local_server(503, b'{"error": "Service Unavailable"}') as (url, requests):
        online(url)
        status, _ = push(tmp_path / "out", "--hub-retries", "2")
    assert status == 1 and requests == ["/api/repos/create"] * 3
    assert_folder_kept(tmp_path / "out", capsys.readouterr().err, "Server error '503 Service Unavailable'")


def test_client_errors_are_not_retried(tmp_path, capsys, online):
    with local_server(403, b'{"error": "You have no write access to me"}') as (url, requests):
        online(url)
        status, _ = push(tmp_path / "out", "--hub-retries", "2")
    assert status == 1 and requests.count("/api/repos/create") == 1
    err = capsys.readouterr().err
    assert_folder_kept(tmp_path / "out", err, "403 Forbidden")
    assert "You have no write access to me" in err
