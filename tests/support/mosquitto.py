"""A real mosquitto broker on a free loopback port with a generated config (persistence on).

Shared by the mqtt tests, the mqtt benchmark and the demo.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.support.servers import wait_until

MOSQUITTO = shutil.which("mosquitto") or shutil.which("mosquitto", path="/usr/sbin:/usr/local/sbin")
MOSQUITTO_PASSWD = shutil.which("mosquitto_passwd")


@dataclass
class Mosquitto:
    workdir: Path
    port: int
    password_file: Path | None = None
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> Mosquitto:
        assert MOSQUITTO is not None
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = [
            f"listener {self.port} 127.0.0.1",
            "user root",  # started as root, mosquitto would otherwise drop to a user that cannot write here
            "persistence true",
            f"persistence_location {self.workdir}/",
            "autosave_interval 1",
            "max_queued_messages 0",  # queue everything for an offline persistent session
            "max_inflight_messages 100",
            "persistent_client_expiration 1h",
            f"log_dest file {self.workdir}/mosquitto.log",
        ]
        if self.password_file is not None:
            conf += [f"password_file {self.password_file}", "allow_anonymous false"]
        else:
            conf.append("allow_anonymous true")
        (self.workdir / "mosquitto.conf").write_text("\n".join(conf) + "\n")
        self.proc = subprocess.Popen(
            [MOSQUITTO, "-c", str(self.workdir / "mosquitto.conf")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

        def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"mosquitto exited with {self.proc.returncode}: {self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return True
            except OSError:
                return False

        wait_until(ready, timeout, what="mosquitto to listen")
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def log(self) -> str:
        try:
            return (self.workdir / "mosquitto.log").read_text(errors="replace")
        except OSError:
            return ""
