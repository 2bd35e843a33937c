package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
)

func TestConstantArrivalsAreEvenlySpacedWithoutDrift(t *testing.T) {
	next, err := arrivalOffsets("constant", 3000, 1)
	if err != nil {
		t.Fatal(err)
	}
	var last time.Duration
	for i := 0; i <= 300000; i++ {
		last = next()
	}
	if last != 100*time.Second {
		t.Fatalf("request 300000 at 3000/s scheduled at %s, want 100s", last)
	}
}

func TestPoissonArrivalsHaveTheRateAndExponentialGaps(t *testing.T) {
	const rate, n = 500.0, 20000
	next, _ := arrivalOffsets("poisson", rate, 7)
	prev := next()
	var sum, sumSq float64
	for i := 0; i < n; i++ {
		cur := next()
		gap := (cur - prev).Seconds()
		sum += gap
		sumSq += gap * gap
		prev = cur
	}
	mean := sum / n
	cv := math.Sqrt(sumSq/n-mean*mean) / mean
	// Exponential gaps: mean 1/rate, coefficient of variation 1 (constant gaps: 0).
	if math.Abs(mean*rate-1) > 0.03 || math.Abs(cv-1) > 0.05 {
		t.Fatalf("mean gap %.6f s (want %.6f), CV %.3f (want 1)", mean, 1/rate, cv)
	}
}

func TestBadArrivalSettingsAreErrors(t *testing.T) {
	if _, err := arrivalOffsets("bursty", 10, 1); err == nil || !strings.Contains(err.Error(), `"bursty" is not one of`) {
		t.Fatalf("got %v", err)
	}
	if _, err := arrivalOffsets("constant", 0, 1); err == nil || !strings.Contains(err.Error(), "-rate 0 is not > 0") {
		t.Fatalf("got %v", err)
	}
}

func TestStallDelayWaitsForTheEndOfTheStall(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct{ elapsed, want time.Duration }{
		{0, 50 * ms}, {10 * ms, 40 * ms}, {49 * ms, 1 * ms}, {50 * ms, 0}, {99 * ms, 0}, {130 * ms, 20 * ms},
	} {
		if got := stallDelay(c.elapsed, 100*ms, 50*ms); got != c.want {
			t.Errorf("stallDelay(%s) = %s, want %s", c.elapsed, got, c.want)
		}
	}
}

func TestCSVHasHeysLayoutAndSkipsErrorsAndWarmup(t *testing.T) {
	ms := time.Millisecond
	var buf bytes.Buffer
	err := writeCSV(&buf, []outcome{
		{intended: 10 * ms, total: 52 * ms, conn: ms, write: ms / 10, delay: 50 * ms, read: ms / 10, status: 200},
		{intended: 20 * ms, total: 3 * ms, err: "connection refused"},
		{intended: -5 * ms, total: 1 * ms, status: 200, warmup: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := CSVHeader + "\n0.0520,0.0010,0.0000,0.0001,0.0500,0.0001,200,0.0100\n"
	if buf.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", buf.String(), want)
	}
}

func TestSummaryCountsLateErrorsAndDropped(t *testing.T) {
	ms := time.Millisecond
	cfg := config{rate: 100, duration: time.Second, slack: ms, arrivals: "constant"}
	s := summarize(cfg, []outcome{
		{lag: 5 * ms, status: 200, warmup: true},
		{lag: 0, status: 200, warmup: true},
		{lag: 0, status: 200, newConn: true},
		{lag: 2 * ms, status: 503},
		{lag: 500 * time.Microsecond, err: "timeout"},
	}, tally{scheduled: 5, dropped: 2, warmupScheduled: 4, warmupDropped: 2, workers: 1}, time.Second, 0, 0)
	if s.Scheduled != 5 || s.Sent != 3 || s.Dropped != 2 || s.Late != 1 || s.Responses != 2 ||
		s.Non2xx != 1 || s.Errors != 1 || s.ErrorKinds["timeout"] != 1 || s.ConnectionsOpened != 1 {
		t.Fatalf("summary %+v", s)
	}
	if s.WarmupScheduled != 4 || s.WarmupNotOnTime != 3 {
		t.Fatalf("warm-up counts %d scheduled, %d not on time; want 4, 3", s.WarmupScheduled, s.WarmupNotOnTime)
	}
	if s.LagMaxS != 0.002 || s.LagP50S != 0.0005 {
		t.Fatalf("lag quantiles %g %g", s.LagP50S, s.LagMaxS)
	}
}
