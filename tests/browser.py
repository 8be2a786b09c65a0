"""A real headless browser for the tests: Debian's ``chromium``, driven over the DevTools protocol on a pipe
(``--remote-debugging-pipe``: JSON messages ending in a NUL byte on file descriptors 3 and 4), so no driver and
no Python package beyond the standard library is needed.

:func:`report_problems` opens a Snakemake report as its reader's browser would and shows each figure and the
Reproduction page through the report's own view code, collecting every script error, console error and
image that does not decode.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

BINARIES = ("chromium", "chromium-browser", "google-chrome")


def binary() -> str | None:
    """The browser on PATH, if any (scripts/system-deps.sh installs Debian's chromium)."""
    return next((found for name in BINARIES if (found := shutil.which(name))), None)


class Browser:
    """One headless browser process and one page, spoken to over the DevTools pipe."""

    def __init__(self, executable: str, profile: Path, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        to_browser, self._send_fd = os.pipe()
        self._recv_fd, from_browser = os.pipe()
        flags = "--headless --no-sandbox --disable-gpu --no-first-run --remote-debugging-pipe"
        command = (
            f'exec "{executable}" {flags} --user-data-dir="{profile}" about:blank 3<&{to_browser} 4>&{from_browser}'
        )
        self.proc = subprocess.Popen(
            ["bash", "-c", command],
            pass_fds=(to_browser, from_browser),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser)
        os.close(from_browser)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=True)

    def _message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._recv_fd], [], [], left)[0]:
                raise TimeoutError("the browser did not answer in time")
            chunk = os.read(self._recv_fd, 1 << 20)
            if not chunk:
                raise RuntimeError("the browser closed its pipe (did it start? run it by hand to see why)")
            self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        message: dict[str, Any] = json.loads(raw)
        return message

    def call(self, method: str, params: dict[str, Any] | None = None, session: bool = False) -> dict[str, Any]:
        """Send one command and return its result; events that arrive meanwhile are kept in :attr:`events`."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        os.write(self._send_fd, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while True:
            reply = self._message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply["result"]
                return result
            if "method" in reply:
                self.events.append(reply)

    def wait_for(self, event: str) -> None:
        """Wait until ``event`` has arrived (kept, like every other, in :attr:`events`)."""
        deadline = time.monotonic() + self.timeout_s
        while not any(e["method"] == event for e in self.events):
            message = self._message(deadline)
            if "method" in message:
                self.events.append(message)

    def evaluate(self, script: str) -> Any:
        """The value of a JavaScript expression (awaited if it is a promise), or the error it threw."""
        result = self.call(
            "Runtime.evaluate", {"expression": script, "awaitPromise": True, "returnByValue": True}, session=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def errors(self) -> list[str]:
        """Every uncaught script error and console or browser-log error so far."""
        found = []
        for e in self.events:
            params = e.get("params", {})
            if e["method"] == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                found.append(f"script error: {details.get('exception', {}).get('description') or details['text']}")
            elif e["method"] == "Runtime.consoleAPICalled" and params.get("type") == "error":
                found.append(
                    "console error: " + " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
                )
            elif e["method"] == "Log.entryAdded" and params["entry"]["level"] == "error":
                found.append(f"browser log error: {params['entry']['text']}")
        return found

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        os.close(self._send_fd)
        os.close(self._recv_fd)


# Shows each figure, then the Reproduction page, as a reader's click does (the report's ToggleViewManager), and
# says what each showed: an image's decoded size, the page's tables and rows.
SHOW_EACH = """
(async () => {
  const paths = (category) => Object.values(categories[category] || {}).flat();
  const shown = {figures: {}, pages: {}, captions: {}};
  const view = new ToggleViewManager(app);
  const settle = () => new Promise((done) => setTimeout(done, 50));
  for (const path of paths("Figures")) {
    view.handleSelectedResult(path);
    await settle();
    const img = [...document.querySelectorAll("img")].find((i) => i.src === results[path].data_uri);
    if (!img) { shown.figures[path] = "not shown"; continue; }
    try { await img.decode(); shown.figures[path] = [img.naturalWidth, img.naturalHeight]; }
    catch (error) { shown.figures[path] = "does not decode: " + error; }
    shown.captions[path] = results[path].caption || "";
  }
  for (const path of paths("Reproduction")) {
    view.handleSelectedResult(path);
    await settle();
    const frame = [...document.querySelectorAll("iframe")].find((f) => f.src === results[path].data_uri);
    const text = await (await fetch(results[path].data_uri)).text();
    const page = new DOMParser().parseFromString(text, "text/html");
    shown.pages[path] = {
      shown: Boolean(frame),
      tables: page.querySelectorAll("table").length,
      rows: page.querySelectorAll("tbody tr").length,
      header: [...page.querySelectorAll("thead th")].slice(0, 12).map((th) => th.textContent),
    };
  }
  return shown;
})()
"""


def report_problems(report: Path, profile: Path) -> tuple[dict[str, Any], list[str]]:
    """Open ``report`` in the headless browser and show each figure and the Reproduction page; return what was
    shown and every error the page raised."""
    executable = binary()
    if executable is None:
        raise FileNotFoundError("no chromium on PATH: scripts/system-deps.sh installs it")
    browser = Browser(executable, profile)
    try:
        browser.call("Page.navigate", {"url": report.resolve().as_uri()}, session=True)
        browser.wait_for("Page.loadEventFired")
        shown = browser.evaluate(SHOW_EACH)
        return shown, browser.errors()
    finally:
        browser.close()
