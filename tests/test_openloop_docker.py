"""The open-loop generator proved on the real engine before it is trusted.

- Against a server that stalls for S at the start of every N (openloop's own
  -stall-server mode), an open loop at a fixed rate must see what the stalls imply:
  a request arriving at phase p < S of a period waits S - p, so the share of
  requests slower than x is (S - x) / N and the slowest waits about S. hey's closed
  loop at the same server sends only its ten waiting requests per stall and hides it.
- At a low rate on the unthrottled Go app, the open loop's latencies agree with hey's.
- Requests it cannot send on time are counted: at a connection cap they are dropped,
  with too little CPU they are late.

Every server runs in a container with no network but its loopback (network_mode none);
the generators join its namespace and send to 127.0.0.1 only.
"""

import time

import pytest
from conftest import hold_engine

from sidecar_bench import hey, image, openloop

pytestmark = pytest.mark.docker

TEST_LABEL = {"org.sidecar-bench.test": "openloop"}
STALL_EVERY_S, STALL_FOR_S = 0.200, 0.100
STALL_URL = "http://127.0.0.1:8081/"
APP_URL = "http://127.0.0.1:8080/work"
RATE, DURATION_S = 1000, 3
# Bounds on each share of the open loop. Below: its arrivals sample the stall's phases
# every 1 ms (constant) or at random (Poisson, 3000 draws: sd < 1 point), so a share more
# than 3 points low means stalled requests went unseen. Above: everything else on a
# shared host only adds delay (the generator's send lag, the server waking late from its
# stall), each extra ms moving the share up by 1/200. On a quiet host the excess is 1-3
# points; a CI run on a busier one measured 6.1 (Poisson, 50 ms), so 10 points allow 20 ms
# of it. What the generator itself adds is bounded apart below (under one point). These upper
# bounds must all hold on one of up to three tries: in one CI run on a VM whose
# neighbours stole time, both arrival kinds measured once 10.3 points over, and a request
# 51 ms over the stall, and passed alone at once (twice each) afterwards.
SHARE_BELOW, SHARE_ABOVE = 0.03, 0.10
# The slowest request: the stall plus at most this much of the server's late wake-up.
SLOWEST_ABOVE_STALL_S = 0.050


@pytest.fixture(scope="module")
def client():
    yield from hold_engine("tests/test_openloop_docker.py")


@pytest.fixture(scope="module")
def images(client):
    base = image.ensure_base(client, "debian:bookworm-slim", "debootstrap")
    return {v: image.ensure_variant(client, v, base) for v in ("go", "loadgen", "loadgen-open")}


@pytest.fixture
def containers(client):
    started = []

    def start(img, **kwargs):
        c = client.containers.run(img, detach=True, labels=TEST_LABEL, **kwargs)
        started.append(c)
        return c

    yield start
    for c in started:
        try:
            c.remove(force=True)
        except Exception:
            pass


def _finish(container, timeout_s):
    status = container.wait(timeout=timeout_s)["StatusCode"]
    out = container.logs(stdout=True, stderr=False).decode()
    err = container.logs(stdout=False, stderr=True).decode()
    assert status == 0, f"{container.attrs['Config']['Cmd']} exited {status}:\n{err[-3000:]}"
    return out, err


def run_openloop(containers, server, url, rate, duration_s, **kwargs):
    """openloop beside `server` (its network namespace): (samples, summary)."""
    args = openloop.command(url, rate, duration_s, wait_ready_s=20, **kwargs)
    lg = containers(
        image.image_tag("loadgen-open"), command=args, network_mode=f"container:{server.id}"
    )
    out, err = _finish(lg, timeout_s=duration_s + 60)
    return hey.parse_csv(out), openloop.parse_summary(err)


def run_hey(containers, server, url, duration_s, concurrency, qps=None):
    """hey beside `server`, after waiting for it to answer: its samples."""
    wait = f"i=0; until curl -sf -o /dev/null {url}; do i=$((i+1)); [ $i -gt 200 ] && exit 1; sleep 0.1; done"
    rate = ["-q", str(qps)] if qps else []
    run = " ".join(
        hey.command(url, duration_s, concurrency)[:1]
        + rate
        + hey.command(url, duration_s, concurrency)[1:]
    )
    lg = containers(
        image.image_tag("loadgen"),
        command=["sh", "-c", f"{wait} && exec {run}"],
        network_mode=f"container:{server.id}",
    )
    out, _ = _finish(lg, timeout_s=duration_s + 60)
    return hey.parse_csv(out)


def slower_than(samples, x_s):
    return float((samples["response_time_s"] > x_s).mean())


def stall_share(x_s):
    """Share of open-loop requests slower than x under the periodic stall."""
    return max(0.0, STALL_FOR_S - x_s) / STALL_EVERY_S


@pytest.fixture
def stall_server(containers, images):
    every, stall = f"{STALL_EVERY_S * 1000:g}ms", f"{STALL_FOR_S * 1000:g}ms"
    return containers(
        image.image_tag("loadgen-open"),
        network_mode="none",
        command=[
            "openloop",
            "-stall-server",
            "127.0.0.1:8081",
            "-stall-every",
            every,
            "-stall-for",
            stall,
        ],
    )


def stalls_seen(samples, summary, arrivals):
    """What no disturbance of the host can fake, asserted; then the share of requests slower than a quarter, half
    and three quarters of the stall, each (measured, what the stalls imply)."""
    assert summary.dropped == 0 and summary.errors == 0, summary
    assert len(samples) == summary.responses == summary.scheduled
    expected_n = RATE * DURATION_S
    assert abs(summary.scheduled - expected_n) <= (
        1 if arrivals == "constant" else 4 * expected_n**0.5
    )
    shares = {
        f"{x_s * 1000:g}ms": (slower_than(samples, x_s), stall_share(x_s))
        for x_s in (STALL_FOR_S / 4, STALL_FOR_S / 2, 3 * STALL_FOR_S / 4)
    }
    # A busy host only adds delay: a share below what the stalls imply means stalled requests went unseen.
    for x, (measured, expected) in shares.items():
        assert measured >= expected - SHARE_BELOW, (
            f"share slower than {x}: {measured:.3f}, the stalls imply {expected:.3f}"
        )
    return shares


def delays_added(samples, summary, shares):
    """What the generator and the host added beyond the stalls, each against its bound: [] when all hold."""
    problems = []
    # Late requests are in the samples, their lag inside their latency; most are on time.
    if not summary.lag_p50_s < 0.001:
        problems.append(f"median send lag {summary.lag_p50_s * 1000:.2f} ms")
    for x, (measured, expected) in shares.items():
        if measured > expected + SHARE_ABOVE:
            problems.append(
                f"share slower than {x}: {measured:.3f}, the stalls imply {expected:.3f}"
            )
    # What the generator itself adds: its send lag, about the response time less the parts
    # of the request it timed. It moves the share by under a point on a quiet host (1.8 points
    # once beside stray busy processes), against the stalls' 25; the rest above the
    # expectation is the server's (waking late from its stall, then a burst to answer).
    lag = samples["response_time_s"] - samples[
        ["dns_dialup_s", "request_write_s", "response_delay_s", "response_read_s"]
    ].sum(axis=1)
    from_send = slower_than(
        samples.assign(response_time_s=samples["response_time_s"] - lag), STALL_FOR_S / 2
    )
    if not shares[f"{STALL_FOR_S * 500:g}ms"][0] - from_send < 0.03:
        problems.append(
            f"the generator's own lag moved the share by {shares[f'{STALL_FOR_S * 500:g}ms'][0] - from_send:.3f}"
        )
    slowest = float(samples["response_time_s"].max())
    if not slowest <= STALL_FOR_S + SLOWEST_ABOVE_STALL_S:
        problems.append(
            f"slowest {slowest * 1000:.1f} ms against a {STALL_FOR_S * 1000:g} ms stall"
        )
    if not slower_than(samples, STALL_FOR_S + 0.020) < 0.03:
        problems.append(
            f"{slower_than(samples, STALL_FOR_S + 0.020):.3f} slower than the stall + 20 ms"
        )
    return problems


@pytest.mark.parametrize("arrivals", ["constant", "poisson"])
def test_open_loop_sees_the_stalls_hey_hides(containers, stall_server, arrivals, record_property):
    # Every try must see the stalls (a busy host cannot hide them: it only adds delay). The bounds on what was
    # added beyond them must all hold on one of up to three tries: a host that stalls the server or the
    # generator for 50 ms once in a while (this VM's neighbours did, once in a CI run) fails one try, a
    # generator or server that adds delay itself fails all three.
    tries = []
    for _ in range(3):
        samples, summary = run_openloop(
            containers, stall_server, STALL_URL, RATE, DURATION_S, arrivals=arrivals
        )
        shares = stalls_seen(samples, summary, arrivals)
        assert float(samples["response_time_s"].max()) >= 0.9 * STALL_FOR_S
        tries.append((delays_added(samples, summary, shares), samples, summary, shares))
        if not tries[-1][0]:
            break
    record_property("tries", [problems for problems, *_ in tries])
    problems, samples, summary, shares = tries[-1]
    assert not problems, [problems for problems, *_ in tries]
    record_property("late_share", summary.late_share)
    record_property("open_loop_shares_measured_expected", shares)
    record_property("open_loop_max_s", float(samples["response_time_s"].max()))

    closed = run_hey(containers, stall_server, STALL_URL, DURATION_S, 10)
    hidden = slower_than(closed, STALL_FOR_S / 2)
    record_property("hey_share_slower_than_half_stall", hidden)
    record_property("hey_p99_s", float(closed["response_time_s"].quantile(0.99)))
    record_property("open_p99_s", float(samples["response_time_s"].quantile(0.99)))
    # Ten workers wait once per stall among thousands of fast requests per period.
    assert hidden < stall_share(STALL_FOR_S / 2) / 5, (
        f"hey: {hidden:.4f} slower than half the stall"
    )


def test_at_a_low_rate_on_the_go_app_its_latencies_agree_with_hey(
    containers, images, record_property
):
    app = containers(image.image_tag("go"), network_mode="none")
    rate, duration_s = 200, 3
    closed = run_hey(containers, app, APP_URL, duration_s, 1, qps=rate)
    samples, summary = run_openloop(containers, app, APP_URL, rate, duration_s)
    assert summary.dropped == 0 and summary.errors == 0 and summary.non_2xx == 0, summary
    assert summary.lag_p50_s < 0.0005, summary
    record_property("late_share", summary.late_share)
    p50_open = float(samples["response_time_s"].median())
    p50_hey = float(closed["response_time_s"].median())
    record_property("p50_open_s", p50_open)
    record_property("p50_hey_s", p50_hey)
    record_property("lag_p50_s", summary.lag_p50_s)
    # The open loop's latency adds its send lag (p50 ~0.1-0.2 ms) to what hey sees: on a
    # quiet host the medians differ by 0.1 ms (0.8 ms against 0.7 ms); a CI run on a busier
    # one measured 1.7 ms against 1.1 ms. A latency timed from the wrong moment would be off
    # by a share of the 5 ms between arrivals, a wrong unit by a factor of 1000.
    assert abs(p50_open - p50_hey) <= 0.001 + 0.5 * p50_hey, (p50_open, p50_hey)


def test_the_warm_up_is_sent_at_the_rate_but_left_out_of_the_rows(containers, images):
    app = containers(image.image_tag("go"), network_mode="none")
    samples, summary = run_openloop(containers, app, APP_URL, 500, 1, warmup_s=1)
    assert summary.warmup_scheduled == 500 and summary.scheduled == 500, summary
    assert len(samples) == summary.responses == 500
    assert samples["offset_s"].min() >= 0 and samples["offset_s"].max() < 1
    assert summary.wall_s < 1.5  # the measured window's, not the warm-up's


def test_requests_over_the_connection_cap_are_dropped_and_counted(containers, stall_server):
    samples, summary = run_openloop(containers, stall_server, STALL_URL, RATE, 1, max_conns=5)
    # 5 connections, each held up to 50 ms in every stall: most of each stall's arrivals find none free.
    assert summary.workers == 5
    assert summary.dropped > 0.2 * summary.scheduled, summary
    assert len(samples) == summary.responses == summary.sent == summary.scheduled - summary.dropped


def test_a_generator_starved_of_cpu_counts_its_late_requests(containers, stall_server):
    args = openloop.command(STALL_URL, 5000, 1, wait_ready_s=20)
    lg = containers(
        image.image_tag("loadgen-open"),
        command=args,
        network_mode=f"container:{stall_server.id}",
        nano_cpus=int(0.05e9),
    )
    started = time.monotonic()
    _, err = _finish(lg, timeout_s=120)
    summary = openloop.parse_summary(err)
    # 5 % of a CPU cannot send 5000 requests/s: it runs 5 ms in every 100 ms. What it
    # sends is late, and its starved workers fill the pool, so the rest is dropped.
    assert summary.late > 0.5 * summary.sent, summary
    assert summary.not_on_time_share > 0.5, summary
    assert time.monotonic() - started < 120
