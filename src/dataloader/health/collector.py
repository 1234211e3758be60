"""The Prometheus families of one health reading (health/reader.py), for exactly one scrape.

prometheus_client collects synchronously, so /metrics reads first and hands the snapshot here; no
await lies between setting it and generating the page. Names are stable: deploy/prometheus/,
deploy/grafana/ and the bloat measurements rely on them (docs/observability.md lists each)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from dataloader.health.reader import HealthSnapshot
from dataloader.storage.health_repository import PARTS


def _families() -> dict[str, GaugeMetricFamily]:
    g = GaugeMetricFamily
    return {f.name: f for f in (
        g("dl_db_health_up", "1 when this scrape read that part of the database's health, else 0", labels=["part"]),
        g("dl_jobs_lease_expired", "Running jobs whose lease expired and that the reaper has not taken back yet "
          "(all nodes; capped at 10000)", labels=["queue"]),
        g("dl_jobs_lease_expired_oldest_seconds", "How long ago the oldest expired lease of a running job ended",
          labels=["queue"]),
        g("dl_jobs_held", "Held jobs (dead letter: failed with held_at set) waiting for an operator (all nodes; "
          "capped at 10000)", labels=["queue"]),
        g("dl_jobs_held_oldest_seconds", "How long the oldest held job has been held", labels=["queue"]),
        g("dl_observers_waiting", "Observers due to run that no node has taken (no capacity or no code for "
          "their kind)", labels=["kind"]),
        g("dl_observers_waiting_oldest_seconds", "How long the oldest waiting observer has been due", labels=["kind"]),
        g("dl_nodes", "Nodes the registry counts as alive, by state (live, superseded)", labels=["state"]),
        g("dl_db_connections", "Client connections of the database server by state (server wide)",
          labels=["state"]),
        g("dl_db_max_connections", "The server's max_connections minus superuser_reserved_connections"),
        g("dl_db_connections_budget", "Connections this node may open: the sum of its pools' maximum sizes"),
        g("dl_db_oldest_xmin_age_seconds", "Age of the oldest transaction holding back the xmin horizon "
          "(0: none)"),
        g("dl_db_oldest_xmin_age_xids", "The largest xid age among what holds back the xmin horizon "
          "(transactions, prepared transactions, replication slots; 0: none)"),
        g("dl_table_dead_tuples", "Dead tuples of dl_jobs and dl_job_events (statistics collector)",
          labels=["table"]),
        g("dl_table_live_tuples", "Live tuples of dl_jobs and dl_job_events (statistics collector)",
          labels=["table"]),
        g("dl_table_last_autovacuum_timestamp_seconds", "When autovacuum last finished on the table "
          "(absent: never since the statistics were reset)", labels=["table"]),
        g("dl_table_last_vacuum_timestamp_seconds", "When a manual VACUUM last finished on the table",
          labels=["table"]),
        # The leader's newest storage sample (health/storage.py), every table we own:
        g("dl_storage_table_bytes", "Size of a table we own by part (heap, indexes, toast; partitions summed), "
          "from the newest storage sample", labels=["table", "part"]),
        g("dl_storage_dead_tuples", "Dead tuples of a table we own (partitions summed), newest storage sample",
          labels=["table"]),
        g("dl_storage_live_tuples", "Live tuples of a table we own (partitions summed), newest storage sample",
          labels=["table"]),
        g("dl_storage_last_autovacuum_timestamp_seconds", "When autovacuum last finished on the table (or on "
          "any of its partitions), newest storage sample", labels=["table"]),
        g("dl_storage_last_autoanalyze_timestamp_seconds", "When autoanalyze last finished on the table (or on "
          "any of its partitions), newest storage sample", labels=["table"]),
        g("dl_storage_sample_timestamp_seconds", "When the newest storage sample was taken (absent: never; "
          "the leader samples every DL_STORAGE_SAMPLE_SEC)"),
    )}


class HealthCollector(Collector):
    def __init__(self) -> None:
        self.snapshot: HealthSnapshot | None = None

    def describe(self) -> Iterator[Metric]:
        # Names only: registering must not trigger a collect (it would need the database).
        yield from _families().values()

    def collect(self) -> Iterator[Metric]:
        snapshot = self.snapshot
        if snapshot is None:  # no App behind this /metrics (or another registry's collect): nothing to say
            return
        f = _families()
        rows = snapshot.rows.rows
        for part in PARTS:
            f["dl_db_health_up"].add_metric([part], 1 if part in rows else 0)
        for row in rows.get("job_alerts", []):
            name = "dl_jobs_lease_expired" if row["kind"] == "lease_expired" else "dl_jobs_held"
            f[name].add_metric([row["queue"]], row["jobs"])
            f[f"{name}_oldest_seconds"].add_metric([row["queue"]], max(row["oldest_sec"] or 0.0, 0.0))
        for row in rows.get("observers_waiting", []):
            f["dl_observers_waiting"].add_metric([row["kind"]], row["observers"])
            f["dl_observers_waiting_oldest_seconds"].add_metric([row["kind"]], max(row["oldest_sec"] or 0.0, 0.0))
        if "live_nodes" in rows:
            states = {row["state"]: row["nodes"] for row in rows["live_nodes"]}
            for state in ("live", "superseded"):  # 0 rather than absent: "no live node" must be alertable
                f["dl_nodes"].add_metric([state], states.get(state, 0))
        for row in rows.get("connections", []):
            f["dl_db_connections"].add_metric([row["state"]], row["connections"])
        if rows.get("connections"):
            first = rows["connections"][0]
            f["dl_db_max_connections"].add_metric([], first["max_connections"] - first["reserved_connections"])
        f["dl_db_connections_budget"].add_metric([], snapshot.connections_budget)
        if "oldest_xmin" in rows:
            holder = rows["oldest_xmin"][0] if rows["oldest_xmin"] else None
            f["dl_db_oldest_xmin_age_seconds"].add_metric([], holder["age_sec"] if holder else 0.0)
            f["dl_db_oldest_xmin_age_xids"].add_metric([], holder["max_xid_age"] if holder else 0)
        for row in rows.get("table_vacuum", []):
            table = row["table"]
            f["dl_table_dead_tuples"].add_metric([table], row["dead_tuples"])
            f["dl_table_live_tuples"].add_metric([table], row["live_tuples"])
            if row["last_autovacuum"] is not None:
                f["dl_table_last_autovacuum_timestamp_seconds"].add_metric([table], row["last_autovacuum"])
            if row["last_vacuum"] is not None:
                f["dl_table_last_vacuum_timestamp_seconds"].add_metric([table], row["last_vacuum"])
        for row in rows.get("storage", []):
            table = row["table"]
            for part, column in (("heap", "heap_bytes"), ("indexes", "index_bytes"), ("toast", "toast_bytes")):
                f["dl_storage_table_bytes"].add_metric([table, part], row[column])
            f["dl_storage_dead_tuples"].add_metric([table], row["dead_tuples"])
            f["dl_storage_live_tuples"].add_metric([table], row["live_tuples"])
            if row["last_autovacuum"] is not None:
                f["dl_storage_last_autovacuum_timestamp_seconds"].add_metric([table], row["last_autovacuum"])
            if row["last_autoanalyze"] is not None:
                f["dl_storage_last_autoanalyze_timestamp_seconds"].add_metric([table], row["last_autoanalyze"])
        if rows.get("storage"):
            f["dl_storage_sample_timestamp_seconds"].add_metric([], rows["storage"][0]["sampled_at"])
        yield from f.values()


HEALTH = HealthCollector()
