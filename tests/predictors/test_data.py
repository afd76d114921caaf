"""The data manager against a real HTTP server on 127.0.0.1, and the Parquet dataset reader."""

from __future__ import annotations

import hashlib
import http.server
import json
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from predictors.data import AssetError, DataManager, DatasetError, DatasetReader

REPO_ROOT = Path(__file__).resolve().parents[2]
PAYLOAD = b"model weights " * 5000
PAYLOAD_SHA = hashlib.sha256(PAYLOAD).hexdigest()


@dataclass
class FileServer:
    """Serves `files` (URL path -> bytes); counts GET requests and keeps their headers."""

    files: dict[str, bytes]
    url: str = ""
    delay: float = 0.0  # pause halfway through each body, to widen races
    hang: float = 0.0  # pause before answering at all
    requests: Counter[str] = field(default_factory=Counter)
    headers: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture
def server() -> Iterator[FileServer]:
    state = FileServer(files={"/files/weights.onnx": PAYLOAD})

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with state.lock:
                state.requests[self.path] += 1
                state.headers.append(dict(self.headers))
            time.sleep(state.hang)
            body = state.files.get(self.path)
            if body is None:
                self.send_error(404, "Not Found")
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            half = len(body) // 2
            self.wfile.write(body[:half])
            self.wfile.flush()
            time.sleep(state.delay)
            self.wfile.write(body[half:])

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def cached_files(cache: Path) -> list[Path]:
    root = cache / "sha256"
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


# -- fetching and the cache ------------------------------------------------------------------


def test_a_fetched_file_is_cached_by_checksum_and_served_without_the_server(
    server: FileServer, tmp_path: Path
) -> None:
    manager = DataManager(tmp_path / "cache")
    url = f"{server.url}/files/weights.onnx"

    first = manager.fetch(url, PAYLOAD_SHA)
    second = manager.fetch(url, PAYLOAD_SHA)

    assert first == second == tmp_path / "cache" / "sha256" / PAYLOAD_SHA / "weights.onnx"
    assert first.read_bytes() == PAYLOAD
    assert server.requests["/files/weights.onnx"] == 1
    assert cached_files(tmp_path / "cache") == [first]  # no temporary file left behind


def test_a_url_without_checksum_is_stored_by_its_hash_and_indexed(
    server: FileServer, tmp_path: Path
) -> None:
    manager = DataManager(tmp_path / "cache")
    url = f"{server.url}/files/weights.onnx"

    first = manager.fetch(url)
    second = manager.fetch(url)

    assert first == second == tmp_path / "cache" / "sha256" / PAYLOAD_SHA / "weights.onnx"
    assert server.requests["/files/weights.onnx"] == 1
    [index] = (tmp_path / "cache" / "urls").glob("*.json")
    assert json.loads(index.read_text()) == {"url": url, "sha256": PAYLOAD_SHA}
    # A later fetch that knows the checksum finds the same file.
    assert manager.fetch(url, PAYLOAD_SHA.upper()) == first
    assert server.requests["/files/weights.onnx"] == 1


@pytest.mark.parametrize("with_checksum", [True, False])
def test_a_corrupted_cached_file_is_detected_and_fetched_again(
    server: FileServer, tmp_path: Path, with_checksum: bool
) -> None:
    manager = DataManager(tmp_path / "cache")
    url = f"{server.url}/files/weights.onnx"
    sha = PAYLOAD_SHA if with_checksum else None
    path = manager.fetch(url, sha)
    corrupt = bytearray(PAYLOAD)
    corrupt[100] ^= 0xFF  # same size
    path.write_bytes(bytes(corrupt))

    again = manager.fetch(url, sha)

    assert again == path
    assert again.read_bytes() == PAYLOAD
    assert server.requests["/files/weights.onnx"] == 2


def test_a_wrong_checksum_raises_and_caches_nothing(server: FileServer, tmp_path: Path) -> None:
    manager = DataManager(tmp_path / "cache")
    url = f"{server.url}/files/weights.onnx"
    wrong = "0" * 64

    with pytest.raises(AssetError) as error:
        manager.fetch(url, wrong)

    message = str(error.value)
    assert url in message
    assert wrong in message
    assert PAYLOAD_SHA in message
    assert error.value.url == url
    assert cached_files(tmp_path / "cache") == []
    assert not (tmp_path / "cache" / "sha256" / wrong).exists()


def test_a_closed_port_raises_asset_error_naming_the_url(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/weights.onnx"

    with pytest.raises(AssetError, match="connection refused") as error:
        DataManager(tmp_path / "cache").fetch(url, PAYLOAD_SHA)

    assert url in str(error.value)
    assert cached_files(tmp_path / "cache") == []


def test_a_missing_file_raises_asset_error_naming_the_url(
    server: FileServer, tmp_path: Path
) -> None:
    url = f"{server.url}/files/missing.onnx"

    with pytest.raises(AssetError, match="not found \\(HTTP 404\\)") as error:
        DataManager(tmp_path / "cache").fetch(url)

    assert url in str(error.value)
    assert cached_files(tmp_path / "cache") == []


def test_a_server_that_does_not_answer_times_out(server: FileServer, tmp_path: Path) -> None:
    server.hang = 2.0
    url = f"{server.url}/files/weights.onnx"

    with pytest.raises(AssetError, match="timed out") as error:
        DataManager(tmp_path / "cache", timeout=0.2).fetch(url, PAYLOAD_SHA)

    assert url in str(error.value)


def test_progress_is_reported_up_to_the_full_size(server: FileServer, tmp_path: Path) -> None:
    calls: list[tuple[int, int | None]] = []

    DataManager(tmp_path / "cache").fetch(
        f"{server.url}/files/weights.onnx", progress=lambda done, total: calls.append((done, total))
    )

    assert calls[-1] == (len(PAYLOAD), len(PAYLOAD))


FETCH_IN_A_PROCESS = """
import sys
from pathlib import Path
from predictors.data import DataManager
print(DataManager(Path(sys.argv[1])).fetch(sys.argv[2], sys.argv[3]))
"""


def test_concurrent_fetches_from_threads_and_processes_download_once(
    server: FileServer, tmp_path: Path
) -> None:
    server.delay = 0.5
    cache = tmp_path / "cache"
    url = f"{server.url}/files/weights.onnx"
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", FETCH_IN_A_PROCESS, str(cache), url, PAYLOAD_SHA],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    results: list[Path] = []
    errors: list[BaseException] = []

    def fetch() -> None:
        try:
            results.append(DataManager(cache).fetch(url, PAYLOAD_SHA))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=fetch) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    outputs = [process.communicate(timeout=60) for process in processes]

    assert errors == []
    assert all(process.returncode == 0 for process in processes), outputs
    paths = set(results) | {Path(stdout.strip()) for stdout, _ in outputs}
    assert paths == {cache / "sha256" / PAYLOAD_SHA / "weights.onnx"}
    assert paths.pop().read_bytes() == PAYLOAD
    assert server.requests["/files/weights.onnx"] == 1


def test_concurrent_fetches_without_checksum_download_once(
    server: FileServer, tmp_path: Path
) -> None:
    server.delay = 0.3
    manager = DataManager(tmp_path / "cache")
    url = f"{server.url}/files/weights.onnx"
    results: list[Path] = []
    threads = [
        threading.Thread(target=lambda: results.append(manager.fetch(url))) for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert len(results) == 4
    assert {p.read_bytes() for p in results} == {PAYLOAD}
    assert server.requests["/files/weights.onnx"] == 1


def test_other_schemes_and_malformed_checksums_are_refused(tmp_path: Path) -> None:
    manager = DataManager(tmp_path / "cache")

    with pytest.raises(AssetError, match="ftp://example.org/x"):
        manager.fetch("ftp://example.org/x")
    with pytest.raises(AssetError, match="64 hexadecimal"):
        manager.fetch("https://example.org/x", "abc")


def test_the_cache_directory_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MLMS_CACHE_DIR", str(tmp_path / "env-cache"))

    assert DataManager().cache_dir == tmp_path / "env-cache"


# -- repo:// ---------------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    (root / "models" / "m" / "1.0.0").mkdir(parents=True)
    (root / "models" / "m" / "1.0.0" / "m.onnx").write_bytes(PAYLOAD)
    return root


def test_repo_urls_are_read_from_a_local_store(store: Path, tmp_path: Path) -> None:
    manager = DataManager(tmp_path / "cache", store_dir=store)

    path = manager.fetch("repo://models/m/1.0.0/m.onnx", PAYLOAD_SHA)

    assert path == (store / "models" / "m" / "1.0.0" / "m.onnx").resolve()
    assert path.read_bytes() == PAYLOAD
    with pytest.raises(AssetError, match="checksum mismatch"):
        manager.fetch("repo://models/m/1.0.0/m.onnx", "1" * 64)
    with pytest.raises(AssetError, match="not found"):
        manager.fetch("repo://models/m/1.0.0/other.onnx")


@pytest.mark.parametrize(
    "url",
    [
        "repo://../secret.txt",
        "repo://models/m/../../../secret.txt",
        "repo:///etc/passwd",
        "repo://models\\m\\secret.txt",
        "repo://models//m.onnx",
        "repo://models/./m.onnx",
        "repo://models/m/1.0.0/m%2e.onnx",
        "repo://",
    ],
)
def test_repo_paths_that_could_leave_the_store_are_refused(
    store: Path, tmp_path: Path, url: str
) -> None:
    (tmp_path / "secret.txt").write_text("secret")

    with pytest.raises(AssetError) as error:
        DataManager(tmp_path / "cache", store_dir=store).fetch(url)

    assert url in str(error.value)


def test_a_symlink_out_of_the_store_is_refused(store: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (store / "models" / "link").symlink_to(outside)

    with pytest.raises(AssetError, match="outside the store"):
        DataManager(tmp_path / "cache", store_dir=store).fetch("repo://models/link/secret.txt")


def test_repo_urls_are_downloaded_from_the_hub_with_the_token(
    server: FileServer, tmp_path: Path
) -> None:
    server.files["/api/v1/artifacts/models/m/1.0.0/m.onnx"] = PAYLOAD
    manager = DataManager(tmp_path / "cache", hub_url=server.url + "/", token="agent-token")

    path = manager.fetch("repo://models/m/1.0.0/m.onnx", PAYLOAD_SHA)

    assert path == tmp_path / "cache" / "sha256" / PAYLOAD_SHA / "m.onnx"
    assert path.read_bytes() == PAYLOAD
    assert server.headers[-1]["Authorization"] == "Bearer agent-token"
    with pytest.raises(AssetError, match="repo://models/m/1.0.0/gone.onnx.*404"):
        manager.fetch("repo://models/m/1.0.0/gone.onnx")


def test_the_token_is_not_sent_to_other_servers(server: FileServer, tmp_path: Path) -> None:
    manager = DataManager(tmp_path / "cache", hub_url="http://127.0.0.1:9", token="agent-token")

    manager.fetch(f"{server.url}/files/weights.onnx", PAYLOAD_SHA)

    assert "Authorization" not in server.headers[-1]


def test_repo_urls_need_a_hub_or_a_store(tmp_path: Path) -> None:
    with pytest.raises(AssetError, match="hub URL or a local store"):
        DataManager(tmp_path / "cache").fetch("repo://models/m/1.0.0/m.onnx")


# -- datasets --------------------------------------------------------------------------------


def write_dataset(path: Path, rows: int, *, row_group_size: int = 3) -> None:
    table = pa.table(
        {
            "image": pa.array([f"image-{i}".encode() for i in range(rows)], type=pa.binary()),
            "label": pa.array([i % 10 for i in range(rows)], type=pa.int64()),
        }
    )
    pq.write_table(table, path, row_group_size=row_group_size)


def test_the_reader_streams_full_batches_and_a_last_partial_one(tmp_path: Path) -> None:
    write_dataset(tmp_path / "d.parquet", 10)
    reader = DatasetReader(tmp_path / "d.parquet", 4)

    batches = list(reader)

    assert reader.count == 10
    assert len(reader) == 3
    assert [len(images) for images, _ in batches] == [4, 4, 2]
    assert [labels.tolist() for _, labels in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert batches[0][0][1] == b"image-1"
    assert all(labels.dtype == "int64" for _, labels in batches)
    assert len(list(reader)) == 3  # a reader can be read again


@pytest.mark.parametrize(("limit", "sizes"), [(5, [4, 1]), (8, [4, 4]), (0, []), (100, [4, 4, 2])])
def test_the_reader_respects_the_limit(tmp_path: Path, limit: int, sizes: list[int]) -> None:
    write_dataset(tmp_path / "d.parquet", 10)
    reader = DatasetReader(tmp_path / "d.parquet", 4, limit=limit)

    batches = list(reader)

    assert [len(images) for images, _ in batches] == sizes
    assert [len(labels) for _, labels in batches] == sizes
    assert len(reader) == len(sizes)
    assert reader.count == sum(sizes)


def test_batches_larger_than_row_groups_are_filled_across_them(tmp_path: Path) -> None:
    write_dataset(tmp_path / "d.parquet", 25, row_group_size=2)

    batches = list(DatasetReader(tmp_path / "d.parquet", 7))

    assert [len(images) for images, _ in batches] == [7, 7, 7, 4]
    assert [i for _, labels in batches for i in labels.tolist()] == [i % 10 for i in range(25)]


def test_a_file_in_the_wrong_format_raises_dataset_error(tmp_path: Path) -> None:
    (tmp_path / "text.parquet").write_text("not parquet")
    pq.write_table(pa.table({"pixels": [b"x"], "label": [1]}), tmp_path / "columns.parquet")

    with pytest.raises(DatasetError, match="not a readable Parquet file"):
        DatasetReader(tmp_path / "text.parquet", 4)
    with pytest.raises(DatasetError, match="'image'"):
        DatasetReader(tmp_path / "columns.parquet", 4)
    with pytest.raises(ValueError, match="batch_size"):
        DatasetReader(tmp_path / "columns.parquet", 0)


def test_a_hub_restarting_during_a_fetch_is_waited_out(tmp_path: Path) -> None:
    """The agent's fetches from the hub wait for it to come back (`retry_seconds`); a fetch
    with no retry time fails at once, saying nothing listens."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    hub = f"http://127.0.0.1:{port}"
    with pytest.raises(AssetError, match="connection refused"):
        DataManager(tmp_path / "once", hub_url=hub).fetch("repo://models/m/1.0.0/m.onnx")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(PAYLOAD)))
            self.end_headers()
            self.wfile.write(PAYLOAD)

        def log_message(self, format: str, *args: object) -> None:
            pass

    started: list[http.server.ThreadingHTTPServer] = []

    def come_back() -> None:
        time.sleep(1.5)
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        started.append(httpd)
        httpd.serve_forever()

    threading.Thread(target=come_back, daemon=True).start()
    try:
        manager = DataManager(tmp_path / "cache", hub_url=hub, retry_seconds=30)
        path = manager.fetch("repo://models/m/1.0.0/m.onnx", PAYLOAD_SHA)
        assert path.read_bytes() == PAYLOAD
    finally:
        for httpd in started:
            httpd.shutdown()
            httpd.server_close()
