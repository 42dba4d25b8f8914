"""Loading a transform ("module:function") and its output contract: each failure names
the transform, the module or the missing columns."""

from __future__ import annotations

import dataclasses
import sys
import uuid

import pytest
from onceflow.config.sink import SinkConfig
from onceflow.errors import TransformError
from onceflow.transforms import (
    check_output,
    load_fast_form,
    load_transform,
    user_columns,
)

pytestmark = pytest.mark.unit


@pytest.fixture
def jobs(tmp_path, monkeypatch):
    """A spark_jobs folder outside the repository, and a fresh module name in it."""
    monkeypatch.setenv("ONCEFLOW_SPARK_JOBS", str(tmp_path))
    monkeypatch.delenv("ONCEFLOW_PYTHONPATH", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    name = f"user_{uuid.uuid4().hex[:8]}"
    yield tmp_path, name
    sys.modules.pop(name, None)


def test_a_function_in_the_spark_jobs_folder(jobs):
    folder, name = jobs
    (folder / f"{name}.py").write_text("def transform(df):\n    return df\n")
    fn = load_transform(f"{name}:transform")
    assert fn("x") == "x"


def test_a_function_of_an_installed_package():
    assert load_transform("json:dumps")([1]) == "[1]"


def test_a_package_in_a_folder_of_onceflow_pythonpath(jobs, tmp_path_factory, monkeypatch):
    """The user's own folder, relative to the current directory, after the spark_jobs one."""
    _, name = jobs
    outside = tmp_path_factory.mktemp("outside")
    (outside / name).mkdir()
    (outside / name / "__init__.py").write_text("")
    (outside / name / "clicks.py").write_text("def transform(df):\n    return ('clicks', df)\n")
    monkeypatch.chdir(outside.parent)
    monkeypatch.setenv("ONCEFLOW_PYTHONPATH", f"/no/such/folder:{outside.name}")
    try:
        assert load_transform(f"{name}.clicks:transform")("x") == ("clicks", "x")
    finally:
        sys.modules.pop(f"{name}.clicks", None)
    assert sys.path[:3] == [str(jobs[0]), "/no/such/folder", str(outside)]


def test_module_not_found_names_module_and_search_path(jobs, monkeypatch):
    folder, name = jobs
    with pytest.raises(
        TransformError,
        match=f"module '{name}' not found; searched the spark_jobs folder {folder} "
        r"\(ONCEFLOW_SPARK_JOBS\), ONCEFLOW_PYTHONPATH \(not set\) and then sys.path",
    ):
        load_transform(f"{name}:transform")
    monkeypatch.setenv("ONCEFLOW_PYTHONPATH", f"{folder}/acme:{folder}")
    with pytest.raises(
        TransformError,
        match=rf"ONCEFLOW_PYTHONPATH \['{folder}/acme \(no such folder\)', '{folder}'\] and",
    ):
        load_transform(f"{name}:transform")
    with pytest.raises(TransformError, match=f"module '{name}.sub' not found"):
        load_transform(f"{name}.sub:transform")


def test_a_missing_import_inside_the_module_is_named(jobs):
    folder, name = jobs
    (folder / f"{name}.py").write_text("import no_such_dependency_xyz\n")
    with pytest.raises(
        TransformError, match="imports 'no_such_dependency_xyz', which is not installed"
    ):
        load_transform(f"{name}:transform")


def test_function_missing_or_not_callable(jobs):
    folder, name = jobs
    (folder / f"{name}.py").write_text("transform = 3\n")
    with pytest.raises(TransformError, match="has no attribute 'nope'"):
        load_transform(f"{name}:nope")
    with pytest.raises(TransformError, match="is a int, not a function"):
        load_transform(f"{name}:transform")


UPSERT = SinkConfig(table="stock", mode="upsert", key=("sku",))
MERGE = SinkConfig(table="views", mode="merge", key=("page",), aggregates=("views",))


def test_a_fast_form_goes_with_the_modules_transform(jobs):
    folder, name = jobs
    (folder / f"{name}.py").write_text(
        "def transform(df):\n    return df\n"
        "def totals(df):\n    return df\n"
        "def fast_form(batch):\n    return [], batch\n"
    )
    assert load_fast_form(f"{name}:transform") is sys.modules[name].fast_form
    assert load_fast_form(f"{name}:totals") is None  # another function: no fast form
    assert load_fast_form("inventory:transform") is None  # a module without one


def test_a_fast_form_that_is_not_a_function_is_named(jobs):
    folder, name = jobs
    (folder / f"{name}.py").write_text("def transform(df):\n    return df\nfast_form = 3\n")
    with pytest.raises(TransformError, match=rf"{name}\.fast_form .* is a int, not a function"):
        load_fast_form(f"{name}:transform")


def test_output_keeps_coordinates_and_the_sink_columns():
    check_output("m:f", "p", ["topic", "partition", "offset", "sku", "qty"], UPSERT)
    with pytest.raises(TransformError, match=r"lacks column\(s\) \['offset'\].*Nothing was staged"):
        check_output("m:f", "p", ["topic", "partition", "sku"], UPSERT)
    with pytest.raises(TransformError, match=r"lacks column\(s\) \['sku'\]; .*key \['sku'\]"):
        check_output("m:f", "p", ["topic", "partition", "offset", "qty"], UPSERT)
    with pytest.raises(TransformError, match=r"lacks column\(s\) \['views'\]"):
        check_output("m:f", "p", ["topic", "partition", "offset", "page"], MERGE)
    ranked = dataclasses.replace(UPSERT, order_by=("lsn",))
    with pytest.raises(TransformError, match=r"lacks column\(s\) \['lsn'\]; .*order_by \['lsn'\]"):
        check_output("m:f", "p", ["topic", "partition", "offset", "sku", "qty"], ranked)
    with pytest.raises(TransformError, match=r"\['sku'\] appear twice"):
        check_output("m:f", "p", ["topic", "partition", "offset", "sku", "sku"], UPSERT)


def test_a_transform_of_decoded_records_keeps_their_error():
    """A registry format's records that did not decode have only their `error`: a transform
    that drops it would publish them as rows of nulls."""
    cols = ["topic", "partition", "offset", "sku", "qty"]
    check_output("m:f", "p", cols, UPSERT)
    check_output("m:f", "p", [*cols, "error"], UPSERT, decoded=True)
    with pytest.raises(TransformError, match=r"lacks column\(s\) \['error'\].*did not decode"):
        check_output("m:f", "p", cols, UPSERT, decoded=True)


def test_user_columns_leave_out_what_the_stage_passes_through():
    cols = ["topic", "partition", "offset", "sku", "error", "key", "value", "qty"]
    assert user_columns(cols) == ("sku", "qty")


def test_an_aggregating_output_has_the_sink_columns_and_records():
    from onceflow.transforms import check_aggregate_output

    check_aggregate_output("m:f", "p", ["page", "views", "records"], MERGE)
    with_dead = ["page", "views", "records", "topic", "partition", "offset", "error"]
    check_aggregate_output("m:f", "p", with_dead, MERGE)
    for columns, missing in (
        (["views", "records"], "['page']"),
        (["page", "records"], "['views']"),
        (["page", "views"], "['records']"),
        (["page", "views", "records", "topic", "offset", "error"], "['partition']"),
    ):
        with pytest.raises(
            TransformError,
            match=rf"aggregating transform 'm:f' of pipeline 'p': its output lacks column\(s\) "
            rf"\{missing[:-1]}\].*Nothing was staged",
        ):
            check_aggregate_output("m:f", "p", columns, MERGE)
    with pytest.raises(TransformError, match=r"\['page'\] appear twice"):
        check_aggregate_output("m:f", "p", ["page", "page", "views", "records"], MERGE)


def test_an_aggregating_transforms_records_are_not_a_user_column():
    cols = ["page", "views", "records", "topic", "partition", "offset", "error", "key", "value"]
    assert user_columns(cols, aggregating=True) == ("page", "views")
    assert user_columns(cols) == ("page", "views", "records")
