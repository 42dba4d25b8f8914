"""The Onceflow ledger UI and API, served inside Airflow's api-server by the Airflow plugin
(onceflow.airflow.plugin mounts onceflow.ui.app.create_app at onceflow.ui.app.MOUNT): what
the pages show (data), the pages (overview, pipeline_ledger, batch_detail) and the blocks
they are built of (html, links, style)."""
