"""An S3 emulator for the chaos stack's lake table (`onceflow-dev chaos --lake-s3`): moto's
server mode, on 127.0.0.1, keeping its objects in memory for the run; no real S3 server
installs here. Started and stopped by its PID."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from onceflow.sinks.lake.storage import Storage

BUCKET = "lake"
# moto takes any key; these only name the emulator's "account" in its logs
ACCESS_KEY, SECRET_KEY = "onceflow-chaos", "onceflow-chaos-secret"


class S3Emulator:
    def __init__(self, folder: Path, port: int) -> None:
        self.folder = folder
        self.port = port
        self.process: subprocess.Popen | None = None

    @property
    def storage(self) -> Storage:
        return Storage(f"http://127.0.0.1:{self.port}", "us-east-1", ACCESS_KEY, SECRET_KEY)

    def start(self, timeout: float = 30.0) -> None:
        """Start moto's server and make the bucket."""
        import boto3

        self.folder.mkdir(parents=True, exist_ok=True)
        server = Path(sys.executable).parent / "moto_server"
        log = (self.folder / "moto.log").open("w")
        self.process = subprocess.Popen(
            [str(server), "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        (self.folder / "moto.pid").write_text(str(self.process.pid))
        client = boto3.client(
            "s3",
            endpoint_url=self.storage.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name="us-east-1",
        )
        deadline = time.monotonic() + timeout
        while True:
            try:
                client.create_bucket(Bucket=BUCKET)
                return
            except Exception:  # noqa: BLE001 - not listening yet
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError(
                        f"the S3 emulator did not start on port {self.port}: see "
                        f"{self.folder / 'moto.log'}"
                    ) from None
                time.sleep(0.2)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
