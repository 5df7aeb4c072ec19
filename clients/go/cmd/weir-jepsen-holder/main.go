// Command weir-jepsen-holder is a permit holder of the partition harness (weir-jepsen
// --go-holders N), written the way an application holds permits with the Go client,
// recording what it believed. It is jepsen_holder.py's twin (clients/python/tests): the
// same arguments, turns and records, so the harness judges both with the same checkers.
//
// The harness starts one per Go holder, beside its Rust holders on the same limit, and
// reads its history from stdout: one JSON object per line in the harness's op format
// (process, kind, f, value, time_ns), on the harness's clock. It is given the harness's
// start on CLOCK_BOOTTIME (--epoch-boot-ns); this process reads CLOCK_BOOTTIME once, from
// /proc/uptime at the instant its hundredths tick over, bracketed by monotonic readings at
// most 100 µs apart (a wider bracket, a preemption, is thrown away and the next tick tried),
// and counts from there on the monotonic clock: a run is far shorter than any suspend this
// would miss. The checkers compare this process's times with the other holders' to the
// millisecond (a grant follows the release that made room by one commit), so an unchecked
// catch of the tick, which a preemption can stretch by milliseconds, would shift every time
// this holder records by as much.
//
// Each turn: open a session (again after one ends), acquire one unit of the limit (waiting
// at most 5 s), hold it for a seeded time in 10 ms steps while racing the work against
// permit.Lost() and checking permit.Err() before each step, then release. Recorded: the
// acquire op (invoke; ok with the fence and the invoke time, fail or info), the hold fact
// (from the grant to the moment the client first told the application the permit may be
// lost, told_ns, or to the release being sent; beside it the client's own deadline), and
// the release op. With --pause-every K every K-th permit is held through a stop of the
// whole process (SIGSTOP, resumed by a helper after --pause-ms), recorded as a
// client-pause fact; the hold then is the belief as G2 defines it, with "application":
// false, and what the application was told after the resume is judged from it.
//
// The run ends when stdin closes: the holder releases what it holds, closes its session
// and exits.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	weir "github.com/weir-limits/weir/clients/go"
)

const (
	acquireWait = 5 * time.Second
	releaseWait = 3 * time.Second
	step        = 10 * time.Millisecond
)

// clock converts this process's monotonic readings to the harness's nanoseconds.
type clock struct {
	base       time.Time // a monotonic reading
	baseBootNs int64     // CLOCK_BOOTTIME at base
	epochNs    int64     // the harness's time 0 on CLOCK_BOOTTIME
}

func uptimeNs() (int64, error) {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("empty /proc/uptime")
	}
	whole, frac, _ := strings.Cut(f[0], ".")
	s, err1 := strconv.ParseInt(whole, 10, 64)
	c, err2 := strconv.ParseInt((frac + "00")[:2], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bad /proc/uptime: %q", f[0])
	}
	return s*1e9 + c*1e7, nil
}

// maxBracket is the widest bracket newClock accepts around the instant /proc/uptime's
// hundredths tick over: half of it bounds the error of every time this process records.
const maxBracket = 100 * time.Microsecond

// newClock pairs a monotonic reading with CLOCK_BOOTTIME. /proc/uptime shows CLOCK_BOOTTIME
// truncated to hundredths, so the value a read first shows after a tick is the boot time of
// the tick itself, which fell between the previous read's start and this read's end: the
// midpoint of those two monotonic readings is taken for it. A bracket wider than
// maxBracket (a preemption in between) is thrown away and the next tick tried, for up to 3 s.
func newClock(epochNs int64) (*clock, error) {
	start := time.Now()
	prevStart := time.Now()
	prev, err := uptimeNs()
	if err != nil {
		return nil, err
	}
	closest := time.Duration(-1)
	for time.Since(start) < 3*time.Second {
		readStart := time.Now()
		up, err := uptimeNs()
		readEnd := time.Now()
		if err != nil {
			return nil, err
		}
		if up != prev {
			width := readEnd.Sub(prevStart)
			if width <= maxBracket {
				base := prevStart.Add(width / 2)
				return &clock{base: base, baseBootNs: up, epochNs: epochNs}, nil
			}
			if closest < 0 || width < closest {
				closest = width
			}
		}
		prev, prevStart = up, readStart
	}
	return nil, fmt.Errorf("no tick of /proc/uptime bracketed within %v in 3 s (closest %v)", maxBracket, closest)
}

func (c *clock) at(t time.Time) int64 {
	ns := c.baseBootNs + int64(t.Sub(c.base)) - c.epochNs
	if ns < 0 {
		return 0
	}
	return ns
}

func (c *clock) now() int64 { return c.at(time.Now()) }

type history struct {
	mu      sync.Mutex
	out     *bufio.Writer
	process int64
	clock   *clock
}

func (h *history) record(kind, f string, value map[string]any, at int64) int64 {
	if at < 0 {
		at = h.clock.now()
	}
	line, _ := json.Marshal(map[string]any{
		"process": h.process, "kind": kind, "f": f, "value": value, "time_ns": at,
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.out.Write(line)
	h.out.WriteByte('\n')
	h.out.Flush()
	return at
}

type holder struct {
	client     *weir.Client
	h          *history
	rng        *rand.Rand
	limit      string
	cap        int64
	ttl        time.Duration
	holdMs     [2]int
	pauseEvery int
	pauseMs    [2]int
	held       int
	resumed    *int64
	stop       <-chan struct{}
}

func (x *holder) stopped() bool {
	select {
	case <-x.stop:
		return true
	default:
		return false
	}
}

func (x *holder) between(r [2]int) int {
	if r[1] <= r[0] {
		return r[0]
	}
	return r[0] + x.rng.Intn(r[1]-r[0]+1)
}

func (x *holder) run() {
	for !x.stopped() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s, err := x.client.OpenSession(ctx, weir.SessionOptions{TTL: x.ttl})
		cancel()
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for !x.stopped() && x.turn(s) {
		}
		ctx, cancel = context.WithTimeout(context.Background(), releaseWait)
		_ = s.Close(ctx) // not confirmed in time: it expires after its TTL
		cancel()
	}
}

// turn is one acquire, hold and release; false when the session is done for.
func (x *holder) turn(s *weir.Session) bool {
	invoked := x.h.record("invoke", "acquire", map[string]any{"limit": x.limit}, -1)
	ctx, cancel := context.WithTimeout(context.Background(), acquireWait)
	p, err := s.Acquire(ctx, x.limit)
	cancel()
	switch {
	case errors.Is(err, weir.ErrTimedOut):
		x.h.record("fail", "acquire", map[string]any{"limit": x.limit, "error": "timed out"}, -1)
		return true
	case errors.Is(err, weir.ErrSessionEnded):
		x.h.record("fail", "acquire", map[string]any{"limit": x.limit, "error": "session lost"}, -1)
		return false
	case err != nil:
		var e *weir.Error
		kind := "info"
		if errors.As(err, &e) && e.Status >= 400 && e.Status < 500 {
			kind = "fail" // refused: nothing held
		}
		x.h.record(kind, "acquire", map[string]any{"limit": x.limit, "error": err.Error()}, -1)
		return false
	}
	granted := x.h.record("ok", "acquire", map[string]any{"limit": x.limit, "fence": p.Fence(), "invoke_ns": invoked}, -1)
	x.held++
	pause := x.pauseEvery > 0 && x.held%x.pauseEvery == 0
	lost := x.work(s, p, pause)
	x.beliefEnded(s, p, granted, lost, pause)
	x.release(p)
	return s.Err() == nil
}

// work holds the permit for a seeded time in steps, each raced against Lost() and preceded
// by Err(); it answers why the permit was lost, if it was.
func (x *holder) work(s *weir.Session, p *weir.Permit, pause bool) error {
	steps := x.between(x.holdMs) / int(step/time.Millisecond)
	if steps < 1 {
		steps = 1
	}
	x.resumed = nil
	for i := 0; i < steps; i++ {
		if err := p.Err(); err != nil {
			return err
		}
		if pause && i == steps/2 {
			pause = false
			if err := x.stall(s, p); err != nil {
				return err
			}
			// Not told at the resume: work on for a TTL, as an application that believes
			// it holds does, so a client that tells it late is seen.
			steps = i + 1 + int(x.ttl/step)
		}
		select {
		case <-p.Lost():
			return p.Err()
		case <-time.After(step):
		}
	}
	return p.Err()
}

// stall stops the whole process (SIGSTOP; a helper sends SIGCONT after the pause), then
// looks at the permit, recorded.
func (x *holder) stall(s *weir.Session, p *weir.Permit) error {
	ms := x.between(x.pauseMs)
	deadline := x.h.clock.now() + int64(s.DeadlineLeft())
	pid := os.Getpid()
	wake := exec.Command("sh", "-c", fmt.Sprintf("sleep %.3f; kill -CONT %d", float64(ms)/1000, pid))
	if err := wake.Start(); err != nil {
		time.Sleep(time.Duration(ms) * time.Millisecond) // no helper: a pause of this goroutine only
	} else {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
		_ = wake.Wait()
	}
	resumed := x.h.clock.now()
	x.resumed = &resumed
	err := p.Err()
	var lost any
	if err != nil {
		lost = err.Error()
	}
	x.h.record("ok", "client-pause", map[string]any{
		"limit": x.limit, "fence": p.Fence(), "ms": ms, "deadline_ns": deadline,
		"resumed_ns": resumed, "lost": lost,
	}, resumed)
	return err
}

// beliefEnded records the belief, now: to the moment the loss was told, else to now; a
// paused one to the session's deadline if that passed first.
func (x *holder) beliefEnded(s *weir.Session, p *weir.Permit, granted int64, lost error, paused bool) {
	seen := x.h.clock.now()
	deadline := seen + int64(s.DeadlineLeft())
	var told, lostText, resumed any
	if lost != nil {
		told, lostText = seen, lost.Error()
	}
	to := seen
	if paused && deadline < to {
		to = deadline
	}
	if to < granted {
		to = granted
	}
	if paused && x.resumed != nil {
		resumed = *x.resumed
	}
	x.h.record("ok", "hold", map[string]any{
		"limit": x.limit, "cap": x.cap, "fence": p.Fence(),
		"from_ns": granted, "to_ns": to, "seen_ns": seen, "deadline_ns": deadline,
		"told_ns": told, "lost": lostText, "application": !paused, "resumed_ns": resumed,
		"client": "go",
	}, seen)
}

func (x *holder) release(p *weir.Permit) {
	v := map[string]any{"limit": x.limit, "fence": p.Fence()}
	x.h.record("invoke", "release", v, -1)
	ctx, cancel := context.WithTimeout(context.Background(), releaseWait)
	defer cancel()
	kind := "ok"
	if err := p.Release(ctx); err != nil {
		kind = "info" // retried in the background; the lease lapses otherwise
	}
	x.h.record(kind, "release", v, -1)
}

func parseRange(s string) ([2]int, error) {
	lo, hi, found := strings.Cut(s, ",")
	a, err := strconv.Atoi(lo)
	if err != nil {
		return [2]int{}, err
	}
	b := a
	if found {
		if b, err = strconv.Atoi(hi); err != nil {
			return [2]int{}, err
		}
	}
	return [2]int{a, b}, nil
}

func main() {
	servers := flag.String("servers", "", "the nodes' HTTP addresses, comma separated")
	tenant := flag.String("tenant", "jepsen", "the tenant")
	limit := flag.String("limit", "", "the limit")
	capacity := flag.Int64("cap", 0, "the limit's concurrent, recorded")
	process := flag.Int64("process", 0, "its process number")
	seed := flag.Int64("seed", 1, "the seed")
	epoch := flag.Int64("epoch-boot-ns", -1, "the harness's time 0 on CLOCK_BOOTTIME, ns")
	ttlMs := flag.Int("ttl-ms", 3000, "the session TTL, ms")
	holdMs := flag.String("hold-ms", "10,150", "a hold, ms (lo,hi)")
	pauseEvery := flag.Int("pause-every", 0, "0: never pause")
	pauseMs := flag.String("pause-ms", "4000,5500", "a pause, ms (lo,hi)")
	flag.Parse()
	hold, err1 := parseRange(*holdMs)
	pause, err2 := parseRange(*pauseMs)
	if *servers == "" || *limit == "" || *epoch < 0 || err1 != nil || err2 != nil {
		fmt.Fprintln(os.Stderr, "weir-jepsen-holder: --servers, --limit, --epoch-boot-ns and valid ranges are required")
		os.Exit(2)
	}
	clk, err := newClock(*epoch)
	if err != nil {
		fmt.Fprintln(os.Stderr, "weir-jepsen-holder: the harness's clock is CLOCK_BOOTTIME:", err)
		os.Exit(2)
	}
	cfg, err := weir.ConfigFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "weir-jepsen-holder:", err)
		os.Exit(2)
	}
	cfg.Servers = strings.Split(*servers, ",")
	cfg.Tenant = *tenant
	client, err := weir.New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "weir-jepsen-holder:", err)
		os.Exit(2)
	}
	defer client.Close()
	stop := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	x := &holder{
		client: client, h: &history{out: bufio.NewWriter(os.Stdout), process: *process, clock: clk},
		rng: rand.New(rand.NewSource(*seed)), limit: *limit, cap: *capacity,
		ttl: time.Duration(*ttlMs) * time.Millisecond, holdMs: hold, pauseEvery: *pauseEvery,
		pauseMs: pause, stop: stop,
	}
	x.run()
}
