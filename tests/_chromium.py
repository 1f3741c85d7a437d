"""Headless Chromium driven over the DevTools protocol, with no dependency beyond the standard library.

Used by tests/test_html_report.py to open the pages of ``--html`` as a browser would: ``Browser.open(path)``
loads a file and records console errors, uncaught exceptions and every request the page makes;
``evaluate`` runs JavaScript in the page; ``hover`` moves the mouse over an element (a real input event, so the
page's own ``mouseenter`` handler runs). Chromium is Debian's ``chromium`` package (scripts/test.sh installs it
with apt-get where it can); :func:`find` returns None where it is missing and the tests skip.

The WebSocket client implements what the DevTools endpoint needs of RFC 6455: the upgrade handshake, masked
text frames out, unmasked (possibly fragmented) frames in.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find() -> str | None:
    """The Chromium executable ($DSE_CHROMIUM, else the first of :data:`NAMES` on PATH), or None."""
    env = os.environ.get("DSE_CHROMIUM")
    if env:
        return env if shutil.which(env) else None
    return next((p for p in map(shutil.which, NAMES) if p), None)


def flags() -> list[str]:
    """Flags for a headless run as root in a container (no sandbox, no GPU, no /dev/shm reliance)."""
    return ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
            "--no-default-browser-check", "--disable-extensions", "--mute-audio", "--hide-scrollbars"]


class _Socket:
    """A WebSocket client connection (text frames)."""

    def __init__(self, url: str, timeout: float = 30.0):
        u = urlparse(url)
        self.sock = socket.create_connection((u.hostname, u.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {u.path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
                          .encode())
        self.file = self.sock.makefile("rb")
        status = self.file.readline()
        if b" 101 " not in status:
            raise ConnectionError(f"DevTools WebSocket handshake failed: {status!r}")
        while self.file.readline() not in (b"\r\n", b""):
            pass

    def send(self, text: str) -> None:
        data = text.encode()
        n = len(data)
        head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n)
                                if n < 65536 else bytes([0x80 | 127]) + struct.pack(">Q", n))
        mask = os.urandom(4)
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _read(self, n: int) -> bytes:
        data = self.file.read(n)
        if len(data) < n:
            raise ConnectionError("DevTools WebSocket closed")
        return data

    def recv(self) -> str:
        parts = []
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            mask = self._read(4) if b1 & 0x80 else None
            payload = self._read(n)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            opcode = b0 & 0x0F
            if opcode == 0x8:
                raise ConnectionError("DevTools WebSocket closed by the browser")
            if opcode in (0x9, 0xA):        # ping / pong: not used by DevTools
                continue
            parts.append(payload)
            if b0 & 0x80:
                return b"".join(parts).decode()

    def close(self) -> None:
        self.sock.close()


class Browser:
    """One headless Chromium process and one page, driven over DevTools (a context manager)."""

    def __init__(self, exe: str, width: int = 1200, height: int = 900):
        self.profile = tempfile.mkdtemp(prefix="dse-chromium-")
        self.proc = subprocess.Popen([exe, *flags(), f"--user-data-dir={self.profile}", "--remote-debugging-port=0",
                                      f"--window-size={width},{height}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.events: list[dict] = []
        self._id = 0
        self.ws: _Socket | None = None
        try:
            self.ws = _Socket(self._page_url(self._port()))
            for domain in ("Page", "Runtime", "Log", "Network"):
                self.call(f"{domain}.enable")
        except (OSError, ValueError, RuntimeError) as exc:     # OSError: sockets, urllib, timeouts
            self.close()
            raise RuntimeError(f"chromium DevTools: {exc}") from exc

    def _port(self, timeout: float = 30.0) -> int:
        lines, t0 = [], time.monotonic()
        assert self.proc.stderr is not None
        while time.monotonic() - t0 < timeout:
            line = self.proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if m:      # keep reading stderr, or chromium blocks once the pipe is full
                threading.Thread(target=self.proc.stderr.read, daemon=True).start()
                return int(m.group(1))
        raise RuntimeError("chromium did not start its DevTools endpoint:\n" + "".join(lines[-20:]))

    def _page_url(self, port: int) -> str:
        for _ in range(50):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
                pages = [t for t in json.load(r) if t.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
            time.sleep(0.1)
        raise RuntimeError("chromium has no page target")

    def call(self, method: str, **params) -> dict:
        """Send one DevTools command; wait for its answer (events that arrive meanwhile go to ``events``)."""
        self._id += 1
        assert self.ws is not None
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def wait_event(self, method: str, timeout: float = 30.0) -> dict:
        t0 = time.monotonic()
        assert self.ws is not None
        while time.monotonic() - t0 < timeout:
            msg = json.loads(self.ws.recv())
            if "id" not in msg:
                self.events.append(msg)
                if msg.get("method") == method:
                    return msg
        raise TimeoutError(method)

    def open(self, path: str | Path, fragment: str = "") -> None:
        """Load a local file and wait for its load event."""
        url = Path(path).resolve().as_uri() + (f"#{fragment}" if fragment else "")
        self.call("Page.navigate", url="about:blank")     # a new document each time (a fragment alone is not)
        self.wait_event("Page.loadEventFired")
        self.events = []                                  # problems() covers this page only
        self.call("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired")

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (JSON-serialisable values)."""
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def hover(self, selector: str) -> None:
        """Scroll ``selector`` into view and move the mouse onto its centre (a real mouse event)."""
        box = self.evaluate(f"(function(){{var e=document.querySelector({json.dumps(selector)});"
                            "e.scrollIntoView({block:'center'});var r=e.getBoundingClientRect();"
                            "return [r.left+r.width/2, r.top+r.height/2];})()")
        self.call("Input.dispatchMouseEvent", type="mouseMoved", x=1, y=1)
        self.call("Input.dispatchMouseEvent", type="mouseMoved", x=box[0], y=box[1])

    def problems(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions, log errors, and requests beyond file: and data:."""
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning", "assert"):
                out.append(f"console.{p['type']}: " + " ".join(str(a.get("value", a.get("description")))
                                                                 for a in p.get("args", [])))
            elif m == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append(f"exception: {d.get('exception', {}).get('description') or d.get('text')}")
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") in ("error", "warning"):
                out.append(f"log {p['entry']['level']}: {p['entry'].get('text')} {p['entry'].get('url', '')}")
            elif m == "Network.requestWillBeSent":
                url = p.get("request", {}).get("url", "")
                if not url.startswith(("file:", "data:", "about:")):
                    out.append(f"network request: {url}")
        return out

    def close(self) -> None:
        try:
            if self.ws is not None:
                self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
