"""hey's CSV -> samples, from outputs recorded from real hey 0.1.4 runs (tests/fixtures/runner/README.md)."""

from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sidecar_bench import hey

FIXTURES = Path(__file__).parent / "fixtures" / "runner"


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_command_is_the_articles_hey_call_with_csv_output():
    assert hey.command("http://127.0.0.1:8080/work", 30, 10) == [
        "hey",
        "-z",
        "30s",
        "-c",
        "10",
        "-o",
        "csv",
        "http://127.0.0.1:8080/work",
    ]
    assert hey.command("http://127.0.0.1:8080/work", 2.5, 1)[2] == "2.5s"


def test_csv_goes_to_a_file_with_no_value_inside_the_script():
    argv = hey.command_to_file(
        "http://127.0.0.1:8080/work", 30, 10, "/tmp/x y.csv", ("timeout", "-s", "KILL", "90")
    )
    assert argv[:2] == ["sh", "-c"] and "30" not in argv[2] and "/tmp/x y.csv" not in argv[2]
    assert argv[3:] == [
        "hey-to-file",
        "/tmp/x y.csv",
        "timeout",
        "-s",
        "KILL",
        "90",
        "hey",
        "-z",
        "30s",
        "-c",
        "10",
        "-o",
        "csv",
        "http://127.0.0.1:8080/work",
    ]


def test_load_generator_cpu_from_its_counter_lines():
    assert hey.parse_loadgen_usage("@@usage_ns 1000000000\n@@usage_ns 3500000000\n") == 2.5
    assert hey.parse_loadgen_usage("@@usage_us 1000000\n@@usage_us 1250000\n") == 0.25
    assert hey.parse_loadgen_usage("@@usage_none\n@@usage_none\n") is None
    # A counter that stood still: no CPU used, not an error.
    assert hey.parse_loadgen_usage("@@usage_us 7\n@@usage_us 7\n") == 0
    with pytest.raises(
        hey.HeyOutputError,
        match=r"^the load generator's CPU counter went backwards: 2.0 then 1.0 s$",
    ):
        hey.parse_loadgen_usage("@@usage_us 2000000\n@@usage_us 1000000\n")


def test_heys_row_cap_is_reported():
    samples = hey.parse_csv(read("hey-z1s-c3.csv"))
    assert not hey.check_samples(samples, 1, 3).cap_reached
    capped = samples.sample(hey.MAX_ROWS, replace=True, random_state=1).reset_index(drop=True)
    assert hey.check_samples(capped, 1, 3).cap_reached


def test_parse_csv_keeps_every_recorded_request_with_all_phases():
    samples = hey.parse_csv(read("hey-ok.csv"))
    assert len(samples) == 40
    assert list(samples.columns) == list(hey.SAMPLE_COLUMNS)
    assert str(samples["status_code"].dtype) == "int64"
    first = samples.iloc[0]
    # First data line of the fixture: 0.0054,0.0005,0.0000,0.0001,0.0040,0.0007,200,0.0001
    assert (
        first.response_time_s,
        first.dns_dialup_s,
        first.response_delay_s,
        first.status_code,
        first.offset_s,
    ) == (0.0054, 0.0005, 0.0040, 200, 0.0001)


def test_non_2xx_rows_are_kept_and_counted():
    samples = hey.parse_csv(read("hey-404.csv"))
    check = hey.check_samples(samples, duration_s=1, concurrency=2)
    assert (len(samples), check.non_2xx) == (6, 6)


def test_transport_failures_leave_only_the_header_and_fail_the_check():
    samples = hey.parse_csv(read("hey-refused.csv"))
    assert len(samples) == 0
    with pytest.raises(ValueError) as err:
        hey.check_samples(samples, duration_s=1, concurrency=2)
    assert str(err.value) == "hey recorded no requests: the app answered nothing in the window"


def test_a_z_run_covers_its_window_back_to_back():
    samples = hey.parse_csv(read("hey-z1s-c3.csv"))
    check = hey.check_samples(samples, duration_s=1, concurrency=3)
    assert check.rows == 2235
    assert check.max_offset_s <= 1.0 + 0.01
    assert 1.0 <= check.span_s < 1.1
    # The load window is hey's own: from its start to the end of the last response.
    assert check.span_s == pytest.approx((samples["offset_s"] + samples["response_time_s"]).max())
    assert check.time_coverage > 0.95


def test_real_go_run_at_quarter_cpu():
    samples = hey.parse_csv(read("hey-go-cpu0.25-z2s-c10.csv"))
    check = hey.check_samples(samples, duration_s=2, concurrency=10)
    assert check.non_2xx == 0 and check.rows == len(samples) > 100
    # CFS throttling at 0.25 vCPU: the slowest requests wait out a whole 100 ms period.
    assert samples["response_time_s"].max() > 0.075


def test_offsets_beyond_the_window_fail_the_check():
    samples = hey.parse_csv(read("hey-z1s-c3.csv"))
    samples["offset_s"] += 5  # as if hey had run 6 s instead of 1 s
    with pytest.raises(ValueError, match="outside the 1 s window"):
        hey.check_samples(samples, duration_s=1, concurrency=3)


def test_status_codes_must_be_http_codes():
    samples = hey.parse_csv(read("hey-ok.csv"))
    samples.loc[3, "status_code"] = 0
    with pytest.raises(ValueError, match="status codes outside"):
        hey.check_samples(samples, duration_s=1, concurrency=4)


def test_text_summary_instead_of_csv_is_refused():
    with pytest.raises(hey.HeyOutputError, match="no CSV header"):
        hey.parse_csv("Summary:\n  Total:\t1.0 secs\n")


def test_old_hey_without_status_and_offset_is_refused():
    with pytest.raises(hey.HeyOutputError, match="status-code and offset"):
        hey.parse_csv(
            "response-time,DNS+dialup,DNS,Request-write,Response-delay,Response-read\n0.1,0,0,0,0.1,0\n"
        )


# ---- any valid rows (hypothesis) ----------------------------------------------------------------


# hey formats every time with "%4.4f" (seconds, 0.1 ms resolution), the status with %d.
ten_thousandths = st.integers(min_value=0, max_value=600_000).map(lambda n: n / 10_000)
rows = st.lists(
    st.tuples(
        ten_thousandths,
        ten_thousandths,
        ten_thousandths,
        ten_thousandths,
        ten_thousandths,
        ten_thousandths,
        st.integers(min_value=100, max_value=599),
        st.integers(min_value=0, max_value=300_000).map(lambda n: n / 10_000),
    ),
    min_size=1,
    max_size=40,
)


def as_hey_csv(records) -> str:
    lines = [",".join(hey.CSV_COLUMNS)]
    lines += [",".join([*(f"{t:4.4f}" for t in r[:6]), str(r[6]), f"{r[7]:4.4f}"]) for r in records]
    return "\n".join(lines) + "\n"


@given(rows)
def test_any_rows_hey_can_write_parse_to_the_same_values_and_checks(records):
    samples = hey.parse_csv(as_hey_csv(records))
    assert len(samples) == len(records)
    assert samples["status_code"].tolist() == [r[6] for r in records]
    for column, at in (("response_time_s", 0), ("response_read_s", 5), ("offset_s", 7)):
        assert samples[column].tolist() == pytest.approx([r[at] for r in records], abs=1e-9)
    check = hey.check_samples(samples, duration_s=30, concurrency=10)
    assert check.rows == len(records) and not check.cap_reached
    assert check.non_2xx == sum(not 200 <= r[6] <= 299 for r in records)
    assert check.span_s == pytest.approx(max(r[7] + r[0] for r in records), abs=1e-9)
    assert check.max_offset_s == pytest.approx(max(r[7] for r in records), abs=1e-9)
    if check.span_s > 0:
        assert check.time_coverage == pytest.approx(
            sum(r[0] for r in records) / (10 * check.span_s)
        )


def test_cells_hey_never_writes_are_refused():
    header = ",".join(hey.CSV_COLUMNS)
    with pytest.raises(hey.HeyOutputError, match=r"^hey CSV has empty or non-numeric cells$"):
        hey.parse_csv(f"{header}\n0.0054,0.0005,,0.0001,0.0040,0.0007,200,0.0001\n")
    with pytest.raises(ValueError):
        hey.parse_csv(f"{header}\n0.0054,0.0005,abc,0.0001,0.0040,0.0007,200,0.0001\n")
    with pytest.raises(hey.HeyOutputError, match=r"^hey CSV has non-integer status codes$"):
        hey.parse_csv(f"{header}\n0.0054,0.0005,0.0000,0.0001,0.0040,0.0007,200.5,0.0001\n")
    # Lines before the header (a wrapper's own output) are skipped.
    assert (
        len(
            hey.parse_csv(
                f"starting\n{header}\n0.0054,0.0005,0.0000,0.0001,0.0040,0.0007,200,0.0001\n"
            )
        )
        == 1
    )


def one_request(status=200, offset=0.5, response_time=0.01):
    row = f"{response_time:.4f},0.0005,0.0000,0.0001,0.0040,0.0007,{status},{offset:.4f}"
    return hey.parse_csv(",".join(hey.CSV_COLUMNS) + "\n" + row + "\n")


def test_status_codes_100_to_599_are_kept_and_only_2xx_count_as_success():
    for status, non_2xx in ((100, 1), (199, 1), (200, 0), (299, 0), (300, 1), (599, 1)):
        assert hey.check_samples(one_request(status), 1, 1).non_2xx == non_2xx, status
    for status in (99, 600):
        with pytest.raises(
            ValueError, match=rf"^hey recorded status codes outside 100..599: \[{status}\]$"
        ):
            hey.check_samples(one_request(status), 1, 1)
    # The error lists the bad codes only, not the valid ones at either end beside them.
    for bad, good in ((600, 100), (99, 599)):
        samples = pd.concat([one_request(good), one_request(bad)], ignore_index=True)
        with pytest.raises(ValueError) as err:
            hey.check_samples(samples, 1, 1)
        assert str(err.value) == f"hey recorded status codes outside 100..599: [{bad}]"


def test_offsets_may_run_one_second_past_the_window_and_never_before_it():
    assert hey.check_samples(one_request(offset=31.0), 30, 1).max_offset_s == 31.0
    with pytest.raises(ValueError) as err:
        hey.check_samples(one_request(offset=31.0001), 30, 1)
    assert str(err.value) == "hey offsets span 31.0001..31.0001 s, outside the 30 s window"
    samples = one_request(offset=0.0)
    samples["offset_s"] = -0.0001
    with pytest.raises(ValueError, match="outside the 30 s window"):
        hey.check_samples(samples, 30, 1)


def test_time_coverage_is_busy_time_over_concurrency_times_the_window():
    samples = one_request(offset=0.0, response_time=0.5)
    assert hey.check_samples(samples, 1, 1).time_coverage == 1.0
    assert hey.check_samples(samples, 1, 4).time_coverage == 0.25
    instant = one_request(offset=0.0, response_time=0.0)
    assert (
        hey.check_samples(instant, 1, 1).span_s,
        hey.check_samples(instant, 1, 1).time_coverage,
    ) == (0.0, 0.0)


def test_heys_start_on_the_uptime_clock():
    assert hey.parse_start_uptime("@@usage_ns 1\n@@start_uptime 1234.56\n@@usage_ns 2\n") == 1234.56
    assert hey.parse_start_uptime("@@usage_none\n") is None
