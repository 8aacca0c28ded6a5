"""A real headless Chromium for the HTML report's tests, driven through chromedriver's
WebDriver HTTP protocol (the standard library's urllib: no client package).

Debian's `chromium` and `chromium-driver` (`make chromium` installs them). The flags keep a
browser on a machine without network from waiting on connections (QUIC, component updates,
sync, background fetches); a fresh profile a session. Console messages come from chromedriver's
browser log, the requests the page made from its performance log (DevTools Network events).
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1000",
]


def missing() -> str | None:
    """Why no browser test can run here (None: both programs are installed)."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).exists():
            return f"{path} is missing: run `make chromium` (Debian's chromium, chromium-driver)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Browser:
    """One chromedriver and one Chromium session; `open` loads a file and waits for the page."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.profile = tempfile.mkdtemp(prefix="tracediff-chromium-")
        self.driver = subprocess.Popen(
            [CHROMEDRIVER, f"--port={self.port}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                self._call("GET", "/status")
                break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline:
                    self.close()
                    raise
                time.sleep(0.05)
        options = {
            "binary": CHROMIUM,
            "args": [*FLAGS, f"--user-data-dir={self.profile}"],
        }
        caps = {
            "browserName": "chrome",
            "goog:chromeOptions": options,
            "goog:loggingPrefs": {"browser": "ALL", "performance": "ALL"},
        }
        got = self._call("POST", "/session", {"capabilities": {"alwaysMatch": caps}})
        self.session = got["sessionId"]

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=120) as f:
                return json.loads(f.read())["value"]
        except urllib.error.HTTPError as e:  # WebDriver's error: say its message
            value = json.loads(e.read() or b"{}").get("value") or {}
            raise RuntimeError(f"{path}: {value.get('message', e)}") from None

    def _s(self, method: str, path: str, body: Any = None) -> Any:
        return self._call(method, f"/session/{self.session}{path}", body)

    def logs(self, kind: str) -> list[dict[str, Any]]:
        """The browser ('browser': console) or 'performance' log since the last read."""
        return list(self._s("POST", "/se/log", {"type": kind}))

    def open(self, page: Path, timeout: float = 60) -> dict[str, Any]:
        """Load `page` and wait until its script says it is done (body data-ready); returns
        {"ready": its value, "console": [(level, message)], "requests": [url, ...]}."""
        self.logs("browser"), self.logs("performance")  # drop what came before
        url = page.resolve().as_uri()
        self._s("POST", "/url", {"url": url})
        deadline = time.monotonic() + timeout
        ready = None
        while time.monotonic() < deadline:
            ready = self.js("return document.body && document.body.getAttribute('data-ready')")
            if ready:
                break
            time.sleep(0.1)
        console = [(e["level"], e["message"]) for e in self.logs("browser")]
        requests = []
        for e in self.logs("performance"):
            msg = json.loads(e["message"])["message"]
            if msg["method"] == "Network.requestWillBeSent":
                requests.append(msg["params"]["request"]["url"])
        return {"ready": ready, "console": console, "requests": requests, "url": url}

    def js(self, script: str, *args: Any) -> Any:
        """Run `script` (a function body; `arguments` are `args`) in the page; its result."""
        return self._s("POST", "/execute/sync", {"script": script, "args": list(args)})

    def screenshot(self) -> bytes:
        return base64.b64decode(self._s("GET", "/screenshot"))

    def close(self) -> None:
        try:
            if getattr(self, "session", None):
                self._call("DELETE", f"/session/{self.session}")
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        finally:
            self.driver.terminate()
            try:
                self.driver.wait(10)
            except subprocess.TimeoutExpired:
                self.driver.kill()
            shutil.rmtree(self.profile, ignore_errors=True)
