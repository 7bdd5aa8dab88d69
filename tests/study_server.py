"""`rlhflab rate STUDY --port 0` (or `rlhflab pair`) in a process of its own, its links read
from its output: the real server, for the browser tests and bench/rating_server.py."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

LINK = re.compile(r"^(\S+): (http://\S+/r/(\S+)/)$")


class Server:
    """`rlhflab rate STUDY --port 0` in its own process, its links read from its output."""

    def __init__(self, study: Path, raters: int = 2, command: str = "rate") -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "rlhflab.cli", command, str(study), "--port", "0", "--raters", str(raters)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.links: dict[str, str] = {}
        while len(self.links) < raters:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"the server stopped: {self.process.stderr.read()}")
            match = LINK.match(line.strip())
            if match:
                self.links[match.group(1)] = match.group(2)
        self.base = next(iter(self.links.values())).split("/r/")[0]
        deadline = time.monotonic() + 30
        while not self._answers():
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError("the server did not answer within 30 s")
            time.sleep(0.1)

    def _answers(self) -> bool:
        try:
            urllib.request.urlopen(self.base + "/", timeout=2)
        except urllib.error.HTTPError:
            return True  # 403: it is up
        except OSError:
            return False
        return True

    def tokens(self) -> dict[str, str]:
        return {name: link.split("/r/")[1] for name, link in self.links.items()}

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process.stdout.close()
        self.process.stderr.close()
