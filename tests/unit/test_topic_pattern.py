"""A pipeline's topics by pattern (`topics = { pattern = ... }`, onceflow.config.topic_pattern):
what the pipelines file takes and refuses, which topics a pattern selects, and the watchers
that carry it (their serialized form unchanged for listed topics)."""

from __future__ import annotations

import pytest
from onceflow.config.pipeline_table import parse_pipeline
from onceflow.config.topic_pattern import TopicPattern, names
from onceflow.errors import PipelineKeyError

pytestmark = pytest.mark.unit

RAW = {"transform": "orders:transform", "sink": {"table": "t"}}


def test_a_pattern_selects_whole_names_and_leaves_kafkas_internal_topics_out():
    cfg = parse_pipeline("p", {**RAW, "topics": {"pattern": r"shop\.public\..*"}})
    assert cfg.topics == () and cfg.subscription == (TopicPattern(r"shop\.public\..*"),)
    on_broker = ["shop.public.b", "shop.public.a", "xshop.public.c", "shop.other.d", "__x"]
    assert names(cfg.subscription, on_broker) == ["shop.public.a", "shop.public.b"]
    assert names((TopicPattern(".*"),), on_broker) == sorted(on_broker[:4])
    assert cfg.reads("shop.public.z") and not cfg.reads("xshop.public.c")
    assert cfg.topics_label == r"the topics matching /shop\.public\..*/"


def test_listed_topics_are_what_they_were():
    cfg = parse_pipeline("p", {**RAW, "topics": ["b", "a"]})
    assert cfg.subscription == ("b", "a") and cfg.topic_pattern == ""
    assert names(cfg.subscription, []) == ["b", "a"]  # listed: asked for, there or not
    assert cfg.reads("a") and not cfg.reads("c")


@pytest.mark.parametrize(
    ("topics", "why"),
    [
        ({"pattern": "shop.("}, "is not a regular expression: missing"),
        ({"pattern": ""}, "is not a regular expression"),
        ({"patern": "x"}, "or a pattern as"),
        ({}, "or a pattern as"),
        ([], "give a non-empty list of topic names, or a pattern"),
    ],
)
def test_a_bad_pattern_is_refused_naming_the_key(topics, why):
    with pytest.raises(PipelineKeyError, match=why) as e:
        parse_pipeline("p", {**RAW, "topics": topics})
    assert "topics" in str(e.value)


def test_the_watchers_carry_the_pattern_and_hash_as_before_without_one():
    from onceflow.airflow.records_trigger import RecordsArrivedTrigger
    from onceflow.airflow.watcher import watching

    cfg = parse_pipeline("p", {**RAW, "topics": {"pattern": "a.*"}, "schedule": "on_records"})
    trigger = RecordsArrivedTrigger(**watching(cfg))
    path, kwargs = trigger.serialize()
    assert kwargs["topic_pattern"] == "a.*" and kwargs["topics"] == []
    assert RecordsArrivedTrigger(**kwargs).subscription == (TopicPattern("a.*"),)
    listed = RecordsArrivedTrigger(**watching(parse_pipeline("q", {**RAW, "topics": ["a"]})))
    assert "topic_pattern" not in listed.serialize()[1]
