"""A user's own pipelines, outside Onceflow's repository (tests/e2e/test_outside_pipeline.py
copies this package into a temporary folder named by ONCEFLOW_PYTHONPATH)."""
