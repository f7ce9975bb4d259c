"""Headless Chromium for the report tests: found on PATH, or a failure naming the install command.

:class:`Browser` keeps one Chromium running and drives it over the DevTools
protocol (``--remote-debugging-port``, on 127.0.0.1), so a test can watch a
page the browser reloads by itself (``<meta http-equiv="refresh">``) instead
of fetching it again.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import websocket

# the command that installs it here: `make chromium` runs the same
INSTALL = (
    "apt-get update && apt-get install -y chromium"
    if os.geteuid() == 0
    else "sudo apt-get update && sudo apt-get install -y chromium"
)
CHROMIUM_MISSING = (
    "headless Chromium is needed for the report browser tests and was not found on PATH; "
    f"install it with: {INSTALL}   (or run `make test`, which installs it when run as root)"
)

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def find_chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Tab:
    """One page target of a :class:`Browser`, over its own DevTools websocket."""

    def __init__(self, ws_url: str) -> None:
        # no Origin header: Chromium refuses websocket origins it was not told to allow
        self.ws = websocket.create_connection(ws_url, timeout=30, suppress_origin=True)
        self._ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command; its result (events arriving meanwhile are dropped)."""
        call_id = next(self._ids)
        self.ws.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == call_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message["result"])

    def evaluate(self, expression: str) -> Any:
        """The value of ``expression`` in the current document; None while it is being replaced."""
        try:
            result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        except RuntimeError:
            return None  # no execution context: a reload is under way
        if "exceptionDetails" in result:
            return None
        return result["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        self.ws.close()


class Browser:
    """A headless Chromium process with a DevTools port; :meth:`open` a URL in a new tab."""

    def __init__(self, chromium: str, profile: Path, timeout: float = 60.0) -> None:
        profile.mkdir(parents=True, exist_ok=True)
        self.log = (profile / "chromium.log").open("wb")
        self.proc = subprocess.Popen(
            [
                chromium,
                *FLAGS,
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                "--window-size=1280,1400",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its renderers share its process group, ended with it
        )
        self.tabs: list[Tab] = []
        active_port = profile / "DevToolsActivePort"  # written once the port listens
        deadline = time.monotonic() + timeout
        while not (active_port.exists() and active_port.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                log = (profile / "chromium.log").read_text(errors="replace")[-2000:]
                raise AssertionError(f"Chromium's DevTools port did not open: {log}")
            time.sleep(0.05)
        self.port = int(active_port.read_text().split()[0])

    def open(self, url: str) -> Tab:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/json/new?{url}", method="PUT"
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            target = json.loads(response.read())
        tab = Tab(target["webSocketDebuggerUrl"])
        self.tabs.append(tab)
        return tab

    def close(self) -> None:
        for tab in self.tabs:
            tab.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
