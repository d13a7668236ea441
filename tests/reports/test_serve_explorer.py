"""The explorer's database: a cursor per request (a slow query stalls only itself), builds that
outlive a refresh while a request reads them, and a private spill folder removed with them."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest
from report_world import planted_rows, planted_store
from serve_world import served

from ddai.pipelines import store
from ddai.reports.serve import ServeConfig
from ddai.reports.serve.app import create_app
from ddai.reports.serve.explorer import Explorer

# minutes of work for DuckDB: only the SQL box's timeout ends it
SLOW = "SELECT count(*) FROM range(100000000) a, range(100000000) b WHERE a.range + b.range = 7"


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    return planted_store(tmp_path_factory.mktemp("explorer"))


def test_a_slow_query_stalls_only_itself(logs):
    # Before: one locked connection; every page waited for the slow query (up to 30 s).
    app = create_app(ServeConfig(logs=logs, sql_timeout_s=4))
    with served(app) as url, httpx.Client(base_url=url, timeout=60) as http:
        html = http.get("/sql").text
        token = html.split('<meta name="ddai-token" content="')[1].split('"')[0]
        t0 = time.monotonic()
        assert http.get("/api/rollouts?size=5").status_code == 200
        baseline = time.monotonic() - t0
        slow: dict[str, object] = {}

        def run_slow() -> None:
            with httpx.Client(base_url=url, timeout=60) as own:
                res = own.post("/api/sql", json={"sql": SLOW}, headers={"X-DDAI-Token": token})
            slow["status"], slow["body"], slow["done"] = (
                res.status_code,
                res.json(),
                time.monotonic(),
            )

        thread = threading.Thread(target=run_slow)
        thread.start()
        time.sleep(1.0)  # the slow query is in the engine now
        answered = []
        for path in ("/api/rollouts?size=5", "/", "/sections", "/group?uid=u2"):
            t = time.monotonic()
            res = http.get(path)
            answered.append((path, res.status_code, time.monotonic() - t, time.monotonic()))
        still_running = thread.is_alive()
        thread.join(60)
    assert [a[1] for a in answered] == [200, 200, 200, 200]
    # every page answered while the slow query was still running, which then hit its timeout
    assert still_running, f"the slow query ended before the pages answered: {answered}"
    assert slow["status"] == 400 and "ran longer than 4 s" in slow["body"]["error"]
    assert all(done < slow["done"] for *_, done in answered), (baseline, answered, slow)


def test_a_build_stays_open_while_a_request_reads_it(tmp_path):
    logs = planted_store(tmp_path / "store")
    ex = Explorer(ServeConfig(logs=logs), recheck_s=0)
    first = ex.current
    spill = Path(first.spill.name)
    assert spill.is_dir()
    with ex.connection() as con:
        store.write_run(logs, "third", planted_rows()["new"])
        with ex.connection() as fresh:  # a request after the ingest reads the new build
            assert fresh.sql("SELECT count(*) FROM explorer").fetchall() == [(32,)]
        assert ex.builds == 2 and ex.current is not first
        # the request that began before the ingest still reads its own version
        assert con.sql("SELECT count(*) FROM explorer").fetchall() == [(24,)]
        assert spill.is_dir()
    # its last cursor done, the old build is closed and its spill folder gone
    with pytest.raises(Exception, match=r"(?i)closed"):
        first.con.execute("SELECT 1")
    assert not spill.exists()
    newer = Path(ex.current.spill.name)
    ex.close()
    assert not newer.exists()


def test_requests_in_threads_read_side_by_side(logs):
    ex = Explorer(ServeConfig(logs=logs))
    counts, errors = [], []

    def ask() -> None:
        try:
            for _ in range(20):
                with ex.connection() as con:
                    counts.append(con.sql("SELECT count(*) FROM explorer").fetchall()[0][0])
        except Exception as e:  # pragma: no cover - the failure shows in the assert below
            errors.append(e)

    threads = [threading.Thread(target=ask) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    ex.close()
    assert errors == [] and counts == [24] * 120
