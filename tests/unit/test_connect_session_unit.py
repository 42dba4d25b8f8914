"""A Spark Connect session's name and URL (onceflow.process.connect_session): one session per
pipeline and version of the code it ships, on the server of the pipeline's connection."""

from __future__ import annotations

import pytest
from onceflow.process.connect_session import session_id, session_url

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sc://h:15002", "sc://h:15002/;session_id=S"),
        ("sc://h:15002/", "sc://h:15002/;session_id=S"),
        # SparkConnectHook.get_connection_url's form: its token and TLS kept
        (
            "sc://h:15002/;user_id=u;token=t;use_ssl=True",
            "sc://h:15002/;user_id=u;token=t;use_ssl=True;session_id=S",
        ),
        ("sc://h:15002/;session_id=old;token=t", "sc://h:15002/;token=t;session_id=S"),
    ],
)
def test_the_session_id_joins_the_connections_parameters(url, expected):
    assert session_url(url, "S") == expected


def test_a_changed_module_gets_a_session_of_its_own(tmp_path):
    """The server refuses to replace a shipped file in a session: new code, new session."""
    module = tmp_path / "user_mod.py"
    module.write_text("def transform(df):\n    return df\n")
    first = session_id("p", [str(module)])
    assert session_id("p", [str(module)]) == first  # the next batch finds it warm
    assert session_id("q", [str(module)]) != first  # pipelines never share one
    module.write_text("def transform(df):\n    return df.limit(1)\n")
    assert session_id("p", [str(module)]) != first


def test_a_connect_error_never_shows_the_connections_token():
    from onceflow.process.connect_session import _first_line

    error = RuntimeError("cannot reach sc://h:15002/;user_id=u;token=s3cret;use_ssl=true\nmore")
    line = _first_line(error)
    assert "s3cret" not in line and "token=***" in line and line.startswith("RuntimeError: ")
