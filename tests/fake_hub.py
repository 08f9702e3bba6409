"""A local stand-in for the Hugging Face Hub HTTP API, enough for `huggingface_hub` 2.4 and transformers to push to it.

It serves what `HfApi.create_repo`, `create_branch`, `upload_folder` (also with `create_pr=True`), `create_commit`,
transformers' `push_to_hub`, `hf_hub_download` and `from_pretrained` ask for. It answers `uploadMode: "regular"` so
that file contents travel inline (no LFS or Xet), requires a bearer token on every write as the Hub does, and keeps
every repository, branch, pull request and commit in memory for tests to inspect. Point a process at it with
`HF_ENDPOINT=<FakeHub.url>` set before `huggingface_hub` is imported: the client reads the endpoint once, at import.
"""

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self
from urllib.parse import parse_qs, unquote, urlsplit

MAIN = "main"
REPO = r"(?P<repo>[^/]+/[^/]+)"
REVISION = r"(?P<revision>refs/pr/\d+|[^/]+)"

# (HTTP status, JSON body or raw bytes, extra headers)
Reply = tuple[int, dict | list | bytes, dict[str, str]]


def error(status: int, message: str, code: str | None = None) -> Reply:
    """An error reply; `code` is the `X-Error-Code` from which the client picks its exception class."""
    return status, {"error": message}, {"X-Error-Code": code} if code else {}


@dataclass
class Commit:
    """One commit the server accepted."""

    repo_id: str
    revision: str
    summary: str
    files: list[str]
    oid: str


@dataclass
class Repo:
    """A repository: its visibility, its pull requests, and the files of every branch and pull request."""

    private: bool
    files: dict[str, dict[str, bytes]] = field(default_factory=lambda: {MAIN: {}})
    pull_requests: list[dict] = field(default_factory=list)


class FakeHub:
    """Serves the Hub API on 127.0.0.1 from a background thread; use as a context manager."""

    def __init__(self):
        self.repos: dict[str, Repo] = {}
        self.commits: list[Commit] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc_info):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    def file(self, repo_id: str, path: str, revision: str = MAIN) -> bytes:
        """The content of `path` at `revision` of `repo_id`; KeyError if it was never pushed."""
        return self.repos[repo_id].files[revision][path]

    def create_repo(self, payload: dict) -> Reply:
        repo_id = f"{payload.get('organization') or 'user'}/{payload['name']}"
        with self.lock:
            if repo_id in self.repos:  # the client reads the url of the existing repository from this reply
                return 409, {"error": "You already created this model repo", "url": f"{self.url}/{repo_id}"}, {}
            self.repos[repo_id] = Repo(private=payload.get("visibility") == "private")
        return 200, {"url": f"{self.url}/{repo_id}", "name": repo_id}, {}

    def create_branch(self, repo_id: str, branch: str, payload: dict) -> Reply:
        files = self.repos[repo_id].files
        with self.lock:
            if branch in files:
                return error(409, f"Branch {branch} already exists")
            files[branch] = dict(files[payload.get("startingPoint") or MAIN])
        return 200, {}, {}

    def create_pull_request(self, repo_id: str, payload: dict) -> Reply:
        repo = self.repos[repo_id]
        with self.lock:
            repo.pull_requests.append(payload)
            number = len(repo.pull_requests)
            repo.files[f"refs/pr/{number}"] = dict(repo.files[MAIN])
        return 200, {"num": number, "url": f"{self.url}/{repo_id}/discussions/{number}"}, {}

    def pull_request(self, repo_id: str, number: int) -> Reply:
        payload = self.repos[repo_id].pull_requests[number - 1]
        return 200, {
            "num": number,
            "title": payload["title"],
            "isPullRequest": True,
            "status": "draft",
            "changes": {"base": f"refs/heads/{MAIN}"},
            "filesWithConflicts": [],
            "author": {"name": "user"},
            "createdAt": "2026-01-01T00:00:00.000Z",
            "repo": {"name": repo_id, "type": "model"},
            "events": [],
            "diff": "",
        }, {}

    def preupload(self, payload: dict) -> Reply:
        """Every file is uploaded inline, in the commit itself."""
        files = [{"path": item["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": None}
                 for item in payload["files"]]
        return 200, {"files": files}, {}

    def commit(self, repo_id: str, revision: str, body: bytes) -> Reply:
        """Applies an ndjson commit payload: a header line, then one line per file with its content inline."""
        if revision not in self.repos[repo_id].files:
            return error(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        header = next(line["value"] for line in lines if line["key"] == "header")
        contents = {}
        for value in (line["value"] for line in lines if line["key"] == "file"):
            content = value["content"]
            inline = value.get("encoding") != "base64"
            contents[value["path"]] = content.encode() if inline else base64.b64decode(content)
        with self.lock:
            oid = hashlib.sha1(f"{len(self.commits)}:{repo_id}:{revision}".encode() + body).hexdigest()
            self.repos[repo_id].files[revision].update(contents)
            self.commits.append(Commit(repo_id, revision, header["summary"], sorted(contents), oid))
        pull_request = f"{self.url}/{repo_id}/discussions/{revision.split('/')[-1]}" if "/pr/" in revision else None
        return 200, {"commitUrl": f"{self.url}/{repo_id}/commit/{oid}", "commitOid": oid,
                     "pullRequestUrl": pull_request}, {}

    def tree(self, repo_id: str, revision: str, folder: str) -> Reply:
        """The files directly under `folder`; a folder holding none answers 404 `EntryNotFound`, as the Hub does."""
        prefix = f"{folder.strip('/')}/" if folder.strip("/") else ""
        files = self.repos[repo_id].files.get(revision, {})
        entries = [
            {"type": "file", "path": path, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
            for path, data in sorted(files.items())
            if path.startswith(prefix) and "/" not in path[len(prefix):]
        ]
        if prefix and not entries:
            return error(404, "Entry not found", "EntryNotFound")
        return 200, entries, {}

    def resolve(self, repo_id: str, revision: str, path: str) -> Reply:
        """A file download; a missing file answers 404 with the `EntryNotFound` code the client understands."""
        data = self.repos[repo_id].files.get(revision, {}).get(path)
        if data is None:
            return error(404, "Entry not found", "EntryNotFound")
        # The client caches by this commit id, so it must change whenever the content does.
        etag = hashlib.sha1(data).hexdigest()
        return 200, data, {"ETag": f'"{etag}"', "X-Repo-Commit": etag}


def _handler_for(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def send(self, status: int, body: dict | list | bytes, headers: dict[str, str]):
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            content_type = "application/octet-stream" if isinstance(body, bytes) else "application/json"
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        @staticmethod
        def repo_of(path: str) -> str | None:
            """The repository a request path names, if any."""
            match = re.match(rf"(?:/api/models)?/{REPO}/(?:resolve|tree|branch|discussions|preupload|commit)/?", path)
            return match["repo"] if match else None

        def do_POST(self):
            url = urlsplit(self.path)
            path, query = unquote(url.path), parse_qs(url.query)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if not self.headers.get("Authorization", "").startswith("Bearer "):
                return self.send(*error(401, "Invalid credentials in Authorization header"))
            if path == "/api/repos/create":
                return self.send(*hub.create_repo(json.loads(body)))
            if path == "/api/validate-yaml":
                return self.send(200, {}, {})
            repo_id = self.repo_of(path)
            if repo_id is not None and repo_id not in hub.repos:
                return self.send(*error(404, "Repository not found", "RepoNotFound"))
            if match := re.fullmatch(rf"/api/models/{REPO}/branch/(?P<branch>.+)", path):
                return self.send(*hub.create_branch(repo_id, match["branch"], json.loads(body or b"{}")))
            if re.fullmatch(rf"/api/models/{REPO}/discussions", path):
                return self.send(*hub.create_pull_request(repo_id, json.loads(body)))
            if re.fullmatch(rf"/api/models/{REPO}/preupload/{REVISION}", path):
                return self.send(*hub.preupload(json.loads(body)))
            if match := re.fullmatch(rf"/api/models/{REPO}/commit/{REVISION}", path):
                if query.get("create_pr") == ["1"]:
                    return self.send(*error(400, "fake hub: open the pull request first, then commit to it"))
                return self.send(*hub.commit(repo_id, match["revision"], body))
            self.send(*error(404, f"fake hub: unknown POST {path}"))

        def do_GET(self):
            path = unquote(urlsplit(self.path).path)
            repo_id = self.repo_of(path)
            if repo_id is not None and repo_id not in hub.repos:
                return self.send(*error(404, "Repository not found", "RepoNotFound"))
            if match := re.fullmatch(rf"/api/models/{REPO}/discussions/(?P<number>\d+)", path):
                return self.send(*hub.pull_request(repo_id, int(match["number"])))
            if match := re.fullmatch(rf"/api/models/{REPO}/tree/{REVISION}/?(?P<folder>.*)", path):
                return self.send(*hub.tree(repo_id, match["revision"], match["folder"]))
            if match := re.fullmatch(rf"/{REPO}/resolve/{REVISION}/(?P<path>.+)", path):
                return self.send(*hub.resolve(repo_id, match["revision"], match["path"]))
            self.send(*error(404, f"fake hub: unknown {self.command} {path}", "RepoNotFound"))

        do_HEAD = do_GET

    return Handler
