// Command openloop is sidecar-bench's open-loop HTTP load generator.
//
// Requests are scheduled at a fixed rate (constant or Poisson inter-arrival times)
// and each one's latency is measured from its INTENDED send time, so a stalled
// server delays the requests users would have sent meanwhile instead of
// silently not sending them (no coordinated omission). Each request is handed to
// an idle worker; a worker owns one keep-alive connection, and the pool grows by
// one worker whenever none is idle, up to -max-conns. A request that finds the
// pool at its cap is dropped, and one sent more than -slack after its intended
// time is late: both are counted in the summary, never hidden. An optional
// -warmup sends at the same rate before the measured window, on the same pool,
// and is left out of the rows and counted apart.
//
// Output: one CSV row per response in the layout of hey 0.1.4's `-o csv`
// (response-time, DNS+dialup, DNS, Request-write, Response-delay, Response-read,
// status-code, offset; seconds, %4.4f), here with response-time measured from the
// intended send time and offset being the intended send time since the start;
// and a JSON summary (rate, duration, scheduled, sent, late, dropped, errors, the
// send lag's quantiles, the generator's own CPU time).
//
// `openloop -stall-server ADDR` instead serves a test server that stalls for
// -stall-for at the start of every -stall-every: a request arriving inside a
// stall is answered when it ends, as a throttled task would answer it.
//
// Standard library only (Debian's Go 1.19).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// SummaryFormat is the version of the summary's JSON layout.
const SummaryFormat = 1

// CSVHeader is hey 0.1.4's `-o csv` header.
const CSVHeader = "response-time,DNS+dialup,DNS,Request-write,Response-delay,Response-read,status-code,offset"

type config struct {
	url       string
	rate      float64
	duration  time.Duration
	warmup    time.Duration
	arrivals  string
	seed      int64
	maxConns  int
	slack     time.Duration
	timeout   time.Duration
	waitReady time.Duration
	csvPath   string
	summary   string
}

// outcome is one request that was sent: a response (err == "") or a transport error.
type outcome struct {
	intended time.Duration // intended send time since the start of the measured window
	lag      time.Duration // actual send time - intended send time
	total    time.Duration // end of the response - intended send time
	conn     time.Duration // GetConn -> GotConn (hey's DNS+dialup)
	dns      time.Duration
	write    time.Duration // GotConn -> WroteRequest
	delay    time.Duration // WroteRequest -> first response byte
	read     time.Duration // first response byte -> body read
	status   int
	err      string
	newConn  bool
	warmup   bool
}

type job struct {
	intended time.Time
	warmup   bool
}

// tally counts what the dispatcher did, apart for the warm-up and the measured window.
type tally struct {
	scheduled, dropped             int
	warmupScheduled, warmupDropped int
	workers                        int
}

// Summary is what the summary JSON holds; every count is over the measured window
// (the warm-up before it, at the same rate, has counts of its own).
type Summary struct {
	Format            int            `json:"format"`
	Tool              string         `json:"tool"`
	GoVersion         string         `json:"go_version"`
	URL               string         `json:"url"`
	Arrivals          string         `json:"arrivals"`
	Seed              int64          `json:"seed"`
	RatePerS          float64        `json:"rate_per_s"`
	DurationS         float64        `json:"duration_s"`
	SlackS            float64        `json:"slack_s"`
	MaxConns          int            `json:"max_conns"`
	TimeoutS          float64        `json:"timeout_s"`
	Scheduled         int            `json:"scheduled"`
	Sent              int            `json:"sent"`
	Late              int            `json:"late"`
	Dropped           int            `json:"dropped"`
	Responses         int            `json:"responses"`
	Non2xx            int            `json:"non_2xx"`
	Errors            int            `json:"errors"`
	ErrorKinds        map[string]int `json:"error_kinds"`
	LagP50S           float64        `json:"lag_p50_s"`
	LagP90S           float64        `json:"lag_p90_s"`
	LagP99S           float64        `json:"lag_p99_s"`
	LagP999S          float64        `json:"lag_p999_s"`
	LagMaxS           float64        `json:"lag_max_s"`
	SentRatePerS      float64        `json:"sent_rate_per_s"`
	Workers           int            `json:"workers"`
	ConnectionsOpened int            `json:"connections_opened"`
	WallS             float64        `json:"wall_s"`
	CPUUserS          float64        `json:"cpu_user_s"`
	CPUSystemS        float64        `json:"cpu_system_s"`
	GOMAXPROCS        int            `json:"gomaxprocs"`
	WarmupS           float64        `json:"warmup_s"`
	WarmupScheduled   int            `json:"warmup_scheduled"`
	WarmupNotOnTime   int            `json:"warmup_not_on_time"`
}

// arrivalOffsets returns a function giving the successive intended send times
// (since the start): i/rate for "constant", a Poisson process for "poisson".
func arrivalOffsets(kind string, rate float64, seed int64) (func() time.Duration, error) {
	if !(rate > 0) || math.IsInf(rate, 0) {
		return nil, fmt.Errorf("-rate %g is not > 0", rate)
	}
	switch kind {
	case "constant":
		i := 0
		return func() time.Duration {
			// From the index, not a running sum: no drift over long windows.
			d := time.Duration(float64(i) * 1e9 / rate)
			i++
			return d
		}, nil
	case "poisson":
		rng := rand.New(rand.NewSource(seed))
		t := 0.0
		return func() time.Duration {
			d := time.Duration(t * 1e9)
			t += rng.ExpFloat64() / rate
			return d
		}, nil
	}
	return nil, fmt.Errorf("-arrivals %q is not one of: constant, poisson", kind)
}

// sleepUntil blocks until t with nanosleep: the runtime's timers wake an idle
// program at millisecond granularity, which would add up to a millisecond of send
// lag to every request.
func sleepUntil(t time.Time) {
	for {
		d := time.Until(t)
		if d <= 0 {
			return
		}
		// Yield first: a worker just readied waits in this thread's run queue,
		// where the nanosleep would hold it until the runtime's monitor takes the
		// queue away (up to 10 ms when idle). Behind schedule, nothing yields.
		runtime.Gosched()
		if d = time.Until(t); d < 20*time.Microsecond {
			continue // shorter than a sleep's own overhead
		}
		ts := syscall.NsecToTimespec(int64(d))
		_ = syscall.Nanosleep(&ts, nil) // EINTR: loop and sleep the rest
	}
}

type generator struct {
	cfg          config
	client       func() *http.Client
	jobs         chan job
	start        time.Time // of the warm-up, if any
	measureStart time.Time // of the measured window
	cpuUser0     time.Duration
	cpuSys0      time.Duration
	wg           sync.WaitGroup
	mu           sync.Mutex
	done         []outcome
	ended        time.Time
}

func newClient(timeout time.Duration) *http.Client {
	tr := &http.Transport{
		Proxy:               nil,
		DisableCompression:  true,
		MaxIdleConnsPerHost: 1,
		ForceAttemptHTTP2:   false, // plain HTTP/1.1, as hey
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}

func (g *generator) worker(first job) {
	defer g.wg.Done()
	client := g.client()
	outcomes := make([]outcome, 0, 256)
	for j, ok := first, true; ok; j, ok = <-g.jobs {
		outcomes = append(outcomes, g.send(client, j))
	}
	client.CloseIdleConnections()
	g.mu.Lock()
	g.done = append(g.done, outcomes...)
	g.mu.Unlock()
}

func (g *generator) send(client *http.Client, j job) outcome {
	var o outcome
	var dnsStart, connStart, reqStart, delayStart, resStart time.Time
	trace := &httptrace.ClientTrace{
		DNSStart: func(httptrace.DNSStartInfo) { dnsStart = time.Now() },
		DNSDone:  func(httptrace.DNSDoneInfo) { o.dns = time.Since(dnsStart) },
		GetConn:  func(string) { connStart = time.Now() },
		GotConn: func(info httptrace.GotConnInfo) {
			o.conn = time.Since(connStart)
			o.newConn = !info.Reused
			reqStart = time.Now()
		},
		WroteRequest: func(httptrace.WroteRequestInfo) {
			o.write = time.Since(reqStart)
			delayStart = time.Now()
		},
		GotFirstResponseByte: func() {
			o.delay = time.Since(delayStart)
			resStart = time.Now()
		},
	}
	req, err := http.NewRequest(http.MethodGet, g.cfg.url, nil)
	if err != nil {
		panic(err) // the URL was parsed at start
	}
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
	sent := time.Now()
	resp, err := client.Do(req)
	if err == nil {
		o.status = resp.StatusCode
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	end := time.Now()
	if err != nil {
		o.err = err.Error()
	} else {
		o.read = end.Sub(resStart)
	}
	o.intended = j.intended.Sub(g.measureStart)
	o.warmup = j.warmup
	o.lag = sent.Sub(j.intended)
	o.total = end.Sub(j.intended)
	return o
}

// run sends the warm-up and the measured window, one schedule through both, and
// returns its counts; the outcomes are in g.done.
func (g *generator) run(next func() time.Duration) tally {
	var t tally
	g.jobs = make(chan job) // unbuffered: a send succeeds only when a worker is idle
	g.start = time.Now()
	g.measureStart = g.start.Add(g.cfg.warmup)
	measuring := false
	for {
		offset := next()
		if offset >= g.cfg.warmup+g.cfg.duration {
			break
		}
		intended := g.start.Add(offset)
		sleepUntil(intended)
		j := job{intended: intended, warmup: offset < g.cfg.warmup}
		if !j.warmup && !measuring {
			measuring = true
			g.cpuUser0, g.cpuSys0 = cpuTimes()
		}
		if j.warmup {
			t.warmupScheduled++
		} else {
			t.scheduled++
		}
		select {
		case g.jobs <- j:
		default:
			if t.workers < g.cfg.maxConns {
				t.workers++
				g.wg.Add(1)
				go g.worker(j)
			} else if j.warmup {
				t.warmupDropped++
			} else {
				t.dropped++
			}
		}
	}
	if !measuring {
		g.cpuUser0, g.cpuSys0 = cpuTimes()
	}
	close(g.jobs)
	g.wg.Wait()
	g.ended = time.Now()
	return t
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	// Nearest rank: the smallest value with at least q of the values at or below it.
	k := int(math.Ceil(q*float64(len(sorted)))) - 1
	if k < 0 {
		k = 0
	}
	return sorted[k]
}

// summarize counts the measured window's outcomes; warm-up outcomes count only
// towards warmup_not_on_time.
func summarize(cfg config, outcomes []outcome, t tally, wall time.Duration, cpuUser, cpuSys time.Duration) Summary {
	s := Summary{
		Format: SummaryFormat, Tool: "openloop", GoVersion: runtime.Version(), URL: cfg.url,
		Arrivals: cfg.arrivals, Seed: cfg.seed, RatePerS: cfg.rate, DurationS: cfg.duration.Seconds(),
		SlackS: cfg.slack.Seconds(), MaxConns: cfg.maxConns, TimeoutS: cfg.timeout.Seconds(),
		Scheduled: t.scheduled, Dropped: t.dropped, ErrorKinds: map[string]int{},
		Workers: t.workers, WallS: wall.Seconds(), CPUUserS: cpuUser.Seconds(), CPUSystemS: cpuSys.Seconds(),
		GOMAXPROCS: runtime.GOMAXPROCS(0), WarmupS: cfg.warmup.Seconds(),
		WarmupScheduled: t.warmupScheduled, WarmupNotOnTime: t.warmupDropped,
	}
	lags := make([]time.Duration, 0, len(outcomes))
	for _, o := range outcomes {
		if o.warmup {
			if o.lag > cfg.slack {
				s.WarmupNotOnTime++
			}
			continue
		}
		s.Sent++
		lags = append(lags, o.lag)
		if o.lag > cfg.slack {
			s.Late++
		}
		if o.newConn {
			s.ConnectionsOpened++
		}
		if o.err != "" {
			s.Errors++
			s.ErrorKinds[o.err]++
			continue
		}
		s.Responses++
		if o.status < 200 || o.status > 299 {
			s.Non2xx++
		}
	}
	sort.Slice(lags, func(a, b int) bool { return lags[a] < lags[b] })
	s.LagP50S = quantile(lags, 0.5).Seconds()
	s.LagP90S = quantile(lags, 0.9).Seconds()
	s.LagP99S = quantile(lags, 0.99).Seconds()
	s.LagP999S = quantile(lags, 0.999).Seconds()
	if len(lags) > 0 {
		s.LagMaxS = lags[len(lags)-1].Seconds()
	}
	s.SentRatePerS = float64(s.Sent) / cfg.duration.Seconds()
	return s
}

// writeCSV writes one hey-layout row per response of the measured window, in
// intended send order.
func writeCSV(w io.Writer, outcomes []outcome) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	fmt.Fprintln(bw, CSVHeader)
	for _, o := range outcomes {
		if o.err != "" || o.warmup {
			continue
		}
		fmt.Fprintf(bw, "%4.4f,%4.4f,%4.4f,%4.4f,%4.4f,%4.4f,%d,%4.4f\n",
			o.total.Seconds(), o.conn.Seconds(), o.dns.Seconds(), o.write.Seconds(),
			o.delay.Seconds(), o.read.Seconds(), o.status, o.intended.Seconds())
	}
	return bw.Flush()
}

func cpuTimes() (user, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// waitUntilReady GETs the URL until it answers (any status) or the time is up.
func waitUntilReady(rawURL string, limit time.Duration) error {
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil}}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(limit)
	var last error
	for {
		resp, err := client.Get(rawURL)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return nil
		}
		last = err
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer within %s: %v", rawURL, limit, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func create(path string) (io.Writer, func() error, error) {
	switch path {
	case "-", "/dev/stdout":
		return os.Stdout, func() error { return nil }, nil
	case "/dev/stderr":
		return os.Stderr, func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	return f, f.Close, nil
}

func runLoad(cfg config) error {
	u, err := url.Parse(cfg.url)
	if err != nil || (u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("URL %q is not an http://host[:port]/path URL", cfg.url)
	}
	next, err := arrivalOffsets(cfg.arrivals, cfg.rate, cfg.seed)
	if err != nil {
		return err
	}
	if cfg.duration <= 0 {
		return fmt.Errorf("-duration %s is not > 0", cfg.duration)
	}
	if cfg.warmup < 0 {
		return fmt.Errorf("-warmup %s is negative", cfg.warmup)
	}
	if cfg.maxConns < 1 {
		return fmt.Errorf("-max-conns %d is not >= 1", cfg.maxConns)
	}
	if cfg.slack < 0 {
		return fmt.Errorf("-slack %s is negative", cfg.slack)
	}
	if cfg.waitReady > 0 {
		if err := waitUntilReady(cfg.url, cfg.waitReady); err != nil {
			return err
		}
	}
	// Fewer collections: each pauses the workers and the dispatcher for a moment.
	debug.SetGCPercent(400)
	g := &generator{cfg: cfg, client: func() *http.Client { return newClient(cfg.timeout) }}
	t := g.run(next)
	user1, sys1 := cpuTimes()
	sort.Slice(g.done, func(a, b int) bool { return g.done[a].intended < g.done[b].intended })
	summary := summarize(cfg, g.done, t, g.ended.Sub(g.measureStart), user1-g.cpuUser0, sys1-g.cpuSys0)

	w, closeCSV, err := create(cfg.csvPath)
	if err != nil {
		return err
	}
	if err := writeCSV(w, g.done); err != nil {
		return fmt.Errorf("writing %s: %v", cfg.csvPath, err)
	}
	if err := closeCSV(); err != nil {
		return fmt.Errorf("writing %s: %v", cfg.csvPath, err)
	}
	sw, closeSummary, err := create(cfg.summary)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(sw)
	if err := enc.Encode(summary); err != nil {
		return fmt.Errorf("writing %s: %v", cfg.summary, err)
	}
	return closeSummary()
}

// stallDelay is how long a request arriving `elapsed` after the server's start
// waits: until the end of the stall it arrived in, or not at all.
func stallDelay(elapsed, every, stall time.Duration) time.Duration {
	phase := elapsed % every
	if phase < stall {
		return stall - phase
	}
	return 0
}

func serveStalls(addr string, every, stall time.Duration) error {
	if every <= 0 || stall < 0 || stall >= every {
		return fmt.Errorf("-stall-every %s and -stall-for %s: need 0 <= stall-for < stall-every", every, stall)
	}
	start := time.Now()
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if d := stallDelay(time.Since(start), every, stall); d > 0 {
			time.Sleep(d)
		}
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "ok\n")
	})
	fmt.Fprintf(os.Stderr, "openloop stall server on %s: stalls %s at the start of every %s\n", addr, stall, every)
	return http.ListenAndServe(addr, mux)
}

func main() {
	var cfg config
	flag.Float64Var(&cfg.rate, "rate", 0, "requests per second (required)")
	flag.DurationVar(&cfg.duration, "duration", 10*time.Second, "length of the window in which requests are scheduled")
	flag.DurationVar(&cfg.warmup, "warmup", 0, "load at the same rate before the window, not recorded (its late and dropped requests are counted apart)")
	flag.StringVar(&cfg.arrivals, "arrivals", "constant", "inter-arrival times: constant or poisson")
	flag.Int64Var(&cfg.seed, "seed", 1, "seed of the Poisson arrivals")
	flag.IntVar(&cfg.maxConns, "max-conns", 1000, "cap on connections (one per worker); a request finding every one busy is dropped")
	flag.DurationVar(&cfg.slack, "slack", time.Millisecond, "a request sent later than this after its intended time counts as late")
	flag.DurationVar(&cfg.timeout, "timeout", 20*time.Second, "per-request timeout")
	flag.DurationVar(&cfg.waitReady, "wait-ready", 0, "before the window, GET the URL until it answers, for at most this long")
	flag.StringVar(&cfg.csvPath, "o", "-", "per-request CSV (hey's layout): a path, or - for stdout")
	flag.StringVar(&cfg.summary, "summary", "/dev/stderr", "summary JSON: a path, or /dev/stderr")
	stallAddr := flag.String("stall-server", "", "serve a stalling test server on this address instead of sending load")
	stallEvery := flag.Duration("stall-every", 100*time.Millisecond, "stall server: period of the stalls")
	stallFor := flag.Duration("stall-for", 50*time.Millisecond, "stall server: length of each stall")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: openloop -rate R [flags] URL\n       openloop -stall-server ADDR [-stall-every D -stall-for D]\n")
		flag.PrintDefaults()
	}
	flag.Parse()

	var err error
	if *stallAddr != "" {
		err = serveStalls(*stallAddr, *stallEvery, *stallFor)
	} else if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	} else {
		cfg.url = flag.Arg(0)
		err = runLoad(cfg)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "openloop: %s\n", strings.TrimSpace(err.Error()))
		os.Exit(1)
	}
}
