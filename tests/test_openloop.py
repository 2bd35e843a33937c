"""openloop's command line and summary reader (no Docker; the generator itself is proved in
test_openloop_docker.py)."""

import json

import pytest

from sidecar_bench import hey, openloop


def summary_json(**changes):
    raw = {
        "format": 1,
        "tool": "openloop",
        "go_version": "go1.19.8",
        "url": "http://127.0.0.1:8080/work",
        "arrivals": "constant",
        "seed": 1,
        "rate_per_s": 1000,
        "duration_s": 3,
        "slack_s": 0.001,
        "max_conns": 1000,
        "timeout_s": 20,
        "scheduled": 3000,
        "sent": 2990,
        "late": 30,
        "dropped": 10,
        "responses": 2985,
        "non_2xx": 2,
        "errors": 5,
        "error_kinds": {"connection reset": 5},
        "lag_p50_s": 0.00005,
        "lag_p90_s": 0.0002,
        "lag_p99_s": 0.0009,
        "lag_p999_s": 0.003,
        "lag_max_s": 0.004,
        "sent_rate_per_s": 996.7,
        "workers": 55,
        "connections_opened": 55,
        "wall_s": 3.05,
        "cpu_user_s": 0.2,
        "cpu_system_s": 0.1,
        "gomaxprocs": 2,
        "warmup_s": 1,
        "warmup_scheduled": 1000,
        "warmup_not_on_time": 3,
    }
    raw.update(changes)
    return json.dumps(raw)


def test_command_is_an_argument_list_with_exact_durations():
    args = openloop.command(
        "http://127.0.0.1:8080/work",
        1500,
        2.5,
        arrivals="poisson",
        max_conns=200,
        slack_s=0.0005,
        seed=7,
        csv_path="/tmp/o.csv",
        summary_path="/tmp/s.json",
        wait_ready_s=10,
        warmup_s=1,
    )
    assert args == [
        "openloop",
        "-rate",
        "1500",
        "-duration",
        "2500000us",
        "-arrivals",
        "poisson",
        "-seed",
        "7",
        "-max-conns",
        "200",
        "-slack",
        "500us",
        "-timeout",
        "20000000us",
        "-o",
        "/tmp/o.csv",
        "-summary",
        "/tmp/s.json",
        "-wait-ready",
        "10000000us",
        "-warmup",
        "1000000us",
        "http://127.0.0.1:8080/work",
    ]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"rate_per_s": 0}, "open-loop rate 0 is not > 0"),
        ({"duration_s": -1}, "open-loop duration -1 is not > 0"),
        ({"arrivals": "bursty"}, "open-loop arrivals 'bursty' is not one of: constant, poisson"),
        ({"max_conns": 0}, "open-loop max_conns 0 is not an integer >= 1"),
        ({"slack_s": -0.001}, "open-loop slack -0.001 s is negative"),
        ({"warmup_s": -1}, "open-loop warm-up -1 s is negative"),
    ],
)
def test_bad_settings_are_clear_errors(kwargs, message):
    settings = {"url": "http://127.0.0.1:8080/work", "rate_per_s": 100, "duration_s": 1, **kwargs}
    with pytest.raises(ValueError, match=message):
        openloop.command(**settings)


def test_summary_is_read_from_the_end_of_stderr_with_its_shares():
    s = openloop.parse_summary("openloop: some note\n" + summary_json() + "\n")
    assert (s.scheduled, s.sent, s.late, s.dropped, s.errors) == (3000, 2990, 30, 10, 5)
    assert s.late_share == pytest.approx(0.01)
    assert s.dropped_share == pytest.approx(10 / 3000)
    assert s.not_on_time_share == pytest.approx(40 / 3000)
    assert s.cpu_per_request_s == pytest.approx(0.3 / 2990)
    assert s.as_record()["error_kinds"] == {"connection reset": 5}
    json.dumps(s.as_record())


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"dropped": 11}, "scheduled 3000 != sent 2990 \\+ dropped 11"),
        ({"errors": 4, "error_kinds": {"x": 4}}, "sent 2990 != responses 2985 \\+ errors 4"),
        ({"late": 2991}, "late 2991 is not within 0..sent 2990"),
        ({"error_kinds": {}}, "error kinds add up to 0, not errors 5"),
        ({"workers": 1001}, "workers 1001 exceed max_conns 1000"),
        ({"format": 2}, "format 2 is not 1"),
    ],
)
def test_inconsistent_summaries_are_refused(changes, message):
    with pytest.raises(openloop.OpenLoopError, match=message):
        openloop.parse_summary(summary_json(**changes))


def test_missing_or_foreign_summaries_are_refused():
    with pytest.raises(openloop.OpenLoopError, match="wrote no summary JSON"):
        openloop.parse_summary('openloop: URL "x" is not an http://host[:port]/path URL\n')
    with pytest.raises(openloop.OpenLoopError, match="not 'openloop'"):
        openloop.parse_summary(summary_json(tool="hey"))
    raw = json.loads(summary_json())
    del raw["late"]
    with pytest.raises(openloop.OpenLoopError, match="lacks late"):
        openloop.parse_summary(json.dumps(raw))


def test_its_csv_is_what_the_hey_parser_reads():
    # The layout the Go unit test pins (main_test.go), read by the statistics' parser.
    text = (
        "response-time,DNS+dialup,DNS,Request-write,Response-delay,Response-read,status-code,offset\n"
        "0.0520,0.0010,0.0000,0.0001,0.0500,0.0001,200,0.0100\n"
    )
    frame = hey.parse_csv(text)
    assert frame["response_time_s"].tolist() == [0.052]
    assert frame["offset_s"].tolist() == [0.01]
