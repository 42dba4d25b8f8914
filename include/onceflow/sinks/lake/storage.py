"""How Onceflow reaches a lake table's files: a local folder, or object storage (`s3://`)
with an endpoint and credentials from an Airflow connection of type `aws` (the sink's
`storage_conn_id`: login = access key id, password = secret access key, extra
`endpoint_url` and `region_name`), or from each library's own defaults (the AWS credential
chain: environment, profile, instance role) without one.

Every file Onceflow reads or writes goes through `Storage.filesystem` (pyarrow's file
systems); the table formats get the same settings in their own words (`delta_options`,
`iceberg_properties`). A Storage travels with the file stage to Spark's executors (it
pickles); its secret never appears in its repr or in `describe`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlparse

# the environment variable a process task hands its storage settings to spark-submit in
# (as it does the ledger's DSN: onceflow.airflow.tasks.ProcessOperator), and the local
# stack's for its S3 emulator
STORAGE_ENV = "ONCEFLOW_LAKE_STORAGE"


@dataclass(frozen=True)
class Storage:
    endpoint: str | None = None  # an S3-compatible endpoint URL (None: AWS's own)
    region: str | None = None
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)

    def describe(self) -> str:
        """Where the files are, without the secret."""
        if self == Storage():
            return "the library defaults (local files; S3 by the AWS credential chain)"
        where = self.endpoint or "AWS S3"
        return f"{where} (region {self.region or 'default'}, key {self.access_key or 'default'})"

    def filesystem(self, uri: str) -> tuple[Any, str]:
        """(pyarrow file system, path in it) of a URI or local path."""
        from pyarrow import fs

        if not uri.startswith("s3://") or self == Storage():
            return fs.FileSystem.from_uri(uri)
        options: dict[str, Any] = {"region": self.region or "us-east-1"}
        if self.access_key:
            options.update(access_key=self.access_key, secret_key=self.secret_key)
        if self.endpoint:
            url = urlparse(self.endpoint)
            options.update(endpoint_override=url.netloc, scheme=url.scheme or "https")
        return fs.S3FileSystem(**options), uri[len("s3://") :]

    def dataset(self, uris: list[str], schema: Any) -> Any:
        """A pyarrow dataset of Parquet files given by URI (all on one file system)."""
        import pyarrow.dataset as ds

        filesystem = self.filesystem(uris[0])[0] if uris else None
        paths = [self.filesystem(u)[1] for u in uris]
        return ds.dataset(paths, schema=schema, format="parquet", filesystem=filesystem)

    def delta_options(self) -> dict[str, str]:
        """deltalake's storage_options (object_store's keys). Commits to S3 use its
        conditional writes (put-if-absent), so two writers never both take a version."""
        out = {}
        if self.endpoint:
            out["AWS_ENDPOINT_URL"] = self.endpoint
            if self.endpoint.startswith("http://"):
                out["AWS_ALLOW_HTTP"] = "true"
        if self.region:
            out["AWS_REGION"] = self.region
        if self.access_key:
            out["AWS_ACCESS_KEY_ID"] = self.access_key
            out["AWS_SECRET_ACCESS_KEY"] = self.secret_key or ""
        if out:
            out["AWS_CONDITIONAL_PUT"] = "etag"
        return out

    def iceberg_properties(self) -> dict[str, str]:
        """pyiceberg's FileIO properties."""
        out = {}
        if self.endpoint:
            out["s3.endpoint"] = self.endpoint
        if self.region:
            out["s3.region"] = self.region
        if self.access_key:
            out["s3.access-key-id"] = self.access_key
            out["s3.secret-access-key"] = self.secret_key or ""
        return out

    def to_env(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None})

    @classmethod
    def from_env(cls, text: str) -> Storage:
        return cls(**json.loads(text))
